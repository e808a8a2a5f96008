// The addresses the two listeners actually bound (PORT=0 in tests picks a free port).
import { HttpServer } from "@effect/platform"
import { Effect, Layer, Ref } from "effect"

export type ListenerName = "api" | "tools"

export class Listeners extends Effect.Service<Listeners>()("gateway/Listeners", {
  effect: Effect.gen(function*() {
    const bound = yield* Ref.make<Partial<Record<ListenerName, string>>>({})
    return {
      record: (name: ListenerName, url: string) => Ref.update(bound, (b) => ({ ...b, [name]: url })),
      all: Ref.get(bound)
    } as const
  })
}) {}

/** Records the address of the HttpServer this layer is provided with. */
export const recordAddress = (name: ListenerName) =>
  Layer.effectDiscard(Effect.gen(function*() {
    const server = yield* HttpServer.HttpServer
    const listeners = yield* Listeners
    const address = server.address
    const url = address._tag === "TcpAddress"
      ? `http://${address.hostname === "0.0.0.0" || address.hostname === "::" ? "127.0.0.1" : address.hostname}:${address.port}`
      : `unix:${address.path}`
    yield* listeners.record(name, url)
  }))
