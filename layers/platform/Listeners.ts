// The addresses the two listeners actually bound (PORT=0 in tests picks a free port).
import { HttpServer } from "@effect/platform"
import { Config, Effect, Layer, Option, Ref } from "effect"

export type ListenerName = "api" | "tools"

/** What a listener is bound to: its URL, or `0.0.0.0:PORT` with `wildcard` (every interface). */
export interface Bind {
  readonly address: string
  readonly wildcard: boolean
}

export class Listeners extends Effect.Service<Listeners>()("gateway/Listeners", {
  effect: Effect.gen(function*() {
    const bound = yield* Ref.make<Partial<Record<ListenerName, string>>>({})
    const binds = yield* Ref.make<Partial<Record<ListenerName, Bind>>>({})
    return {
      record: (name: ListenerName, url: string, bind: Bind) =>
        Effect.zipRight(Ref.update(bound, (b) => ({ ...b, [name]: url })), Ref.update(binds, (b) => ({ ...b, [name]: bind }))),
      /** A URL this host reaches each listener at (loopback for a wildcard bind). */
      all: Ref.get(bound),
      /** What each listener is bound to, for the start lines. */
      binds: Ref.get(binds)
    } as const
  })
}) {}

/** `host:port`, IPv6 in brackets. */
const hostPort = (hostname: string, port: number) => `${hostname.includes(":") ? `[${hostname}]` : hostname}:${port}`

/** Records the address of the HttpServer this layer is provided with. */
export const recordAddress = (name: ListenerName) =>
  Layer.effectDiscard(Effect.gen(function*() {
    const server = yield* HttpServer.HttpServer
    const listeners = yield* Listeners
    const address = server.address
    if (address._tag !== "TcpAddress") {
      return yield* listeners.record(name, `unix:${address.path}`, { address: `unix:${address.path}`, wildcard: false })
    }
    const wildcard = address.hostname === "0.0.0.0" || address.hostname === "::"
    const url = `http://${hostPort(wildcard ? "127.0.0.1" : address.hostname, address.port)}`
    yield* listeners.record(name, url, { address: wildcard ? hostPort(address.hostname, address.port) : url, wildcard })
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

