// The addresses the two listeners actually bound (PORT=0 in tests picks a free port).
import { HttpServer } from "@effect/platform"
import { Config, Effect, Layer, Option, Ref } from "effect"

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

/** GATEWAY_MCP_PUBLIC_URL, else the tool listener's bound address, else 127.0.0.1:MCP_PORT. */
export const mcpPublicUrl = Effect.gen(function*() {
  const configured = yield* Config.option(Config.string("GATEWAY_MCP_PUBLIC_URL")).pipe(Effect.orDie)
  if (Option.isSome(configured) && configured.value !== "") return configured.value.replace(/\/+$/, "")
  const bound = (yield* (yield* Listeners).all).tools
  if (bound !== undefined) return bound
  const port = yield* Config.integer("MCP_PORT").pipe(Config.withDefault(8081), Effect.orDie)
  return `http://127.0.0.1:${port}`
})

