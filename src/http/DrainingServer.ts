// The node:http server behind both listeners. Graceful shutdown (SIGTERM/SIGINT): stop accepting
// connections, let the requests in flight finish (streams run to their end) up to
// GATEWAY_SHUTDOWN_TIMEOUT or a forced stop, then cut the rest. A cut stream settles what it
// emitted (Inference), and the settlement queue drains after the listeners have closed
// (Settlements). Slow clients are bounded: headers and whole request bodies have deadlines, and
// each listener caps its connections. A front route may take requests before the platform's
// handler sees them (src/inference/ChatRoute.ts).
import { HttpServer } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Config, ConfigError, Duration, Effect, Either, Layer } from "effect"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { countConfig, durationMsConfig } from "../../layers/lib/ConfigValues.js"
import { shutdownTimeout } from "../../layers/lib/StopTimes.js"

/** Takes a request (true) or leaves it to the platform's handler (false). */
export type FrontRoute = (req: IncomingMessage, res: ServerResponse) => boolean

/** What one slow or greedy client may hold of a listener. */
export interface ConnectionLimits {
  /** Time to receive a request's headers (node's headersTimeout). */
  readonly headersTimeoutMs: number
  /** Time to receive a whole request, body included (node's requestTimeout); answers are not bound by it. */
  readonly requestTimeoutMs: number
  /** How long an idle keep-alive connection stays open between requests. */
  readonly keepAliveTimeoutMs: number
  /** Open connections per listener; connections beyond are closed as they arrive. */
  readonly maxConnections: number
}

export const connectionLimits: Config.Config<ConnectionLimits> = Config.all({
  headersTimeoutMs: durationMsConfig("GATEWAY_HEADERS_TIMEOUT", 20_000, 1),
  requestTimeoutMs: durationMsConfig("GATEWAY_REQUEST_TIMEOUT", 60_000, 1),
  keepAliveTimeoutMs: durationMsConfig("GATEWAY_KEEPALIVE_TIMEOUT", 5_000, 1),
  maxConnections: countConfig("GATEWAY_MAX_CONNECTIONS", 10_000)
}).pipe(
  // Node refuses a headers deadline past the request's (the headers are part of the request).
  Config.mapOrFail((limits) =>
    limits.headersTimeoutMs <= limits.requestTimeoutMs
      ? Either.right(limits)
      : Either.left(ConfigError.InvalidData(["GATEWAY_HEADERS_TIMEOUT"], "expected at most GATEWAY_REQUEST_TIMEOUT"))
  )
)

/**
 * Node checks the two request deadlines on a timer (every 30 s by default, so a deadline could
 * overrun by that much): at most 2 s, or a quarter of the shorter deadline, keeps the overrun
 * small; the check walks only the connections still receiving a request.
 */
const checkingIntervalMs = (limits: ConnectionLimits) =>
  Math.min(2_000, Math.max(10, Math.floor(Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs) / 4)))

/** Draining servers of this process, and whether a forced stop asked them to cut at once. */
const draining = new Set<Server>()
let cutAtOnce = false

/**
 * A forced stop (a repeated stop signal, src/StopSignals.ts): every draining server, and any that
 * starts draining later, cuts its connections now instead of at the deadline. The requests cut
 * are settled as at the deadline.
 */
export const cutDrainingConnections = (): void => {
  cutAtOnce = true
  for (const server of draining) server.closeAllConnections()
}

/**
 * A node:http server whose close() (what @effect/platform-node calls when the listener's scope
 * closes, then waits for) drains: Node closes idle keep-alive connections at once, busy ones when
 * their response ends, and the deadline closes whatever is still open.
 */
export const drainingServer = (deadline: Duration.Duration, limits: ConnectionLimits): Server => {
  const server = createServer({
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    connectionsCheckingInterval: checkingIntervalMs(limits)
  })
  server.maxConnections = limits.maxConnections
  const close = server.close.bind(server)
  server.close = (callback?: (err?: Error) => void) => {
    const cut = setTimeout(() => server.closeAllConnections(), Duration.toMillis(deadline))
    cut.unref()
    draining.add(server)
    close((err) => {
      clearTimeout(cut)
      draining.delete(server)
      callback?.(err)
    })
    if (cutAtOnce) server.closeAllConnections()
    return server
  }
  return server
}

/**
 * The platform's HttpServer on `server`, whose requests go to `front` first: @effect/platform-node
 * opens and closes the listener; its handler (made for the HttpApp it is asked to serve) is the
 * one "request" listener's fallback, for every request the front route leaves. Upgrades are not
 * served (no route of the gateway's takes a WebSocket).
 */
const frontedServer = (server: Server, front: FrontRoute, listen: { readonly port: number; readonly host: string }) =>
  Effect.map(NodeHttpServer.make(() => server, listen), (listener) =>
    HttpServer.make({
      address: listener.address,
      serve: (app, middleware) =>
        Effect.gen(function*() {
          const platform = yield* (middleware === undefined ? NodeHttpServer.makeHandler(app) : NodeHttpServer.makeHandler(app, middleware))
          const handler = (req: IncomingMessage, res: ServerResponse) => {
            if (!front(req, res)) platform(req, res)
          }
          server.on("request", handler)
          yield* Effect.addFinalizer(() => Effect.sync(() => server.off("request", handler)))
        })
    }))

/**
 * The listener's HttpServer over a draining server, as NodeHttpServer.layerConfig makes it, with
 * the front route `front` makes (none: the platform's handler takes every request).
 */
export const drainingServerLayer = <E = never, R = never>(
  options: { readonly port: Config.Config<number>; readonly host: Config.Config<string> },
  front: Effect.Effect<FrontRoute | undefined, E, R> = Effect.succeed(undefined)
) =>
  Layer.unwrapEffect(Effect.gen(function*() {
    const deadline = yield* shutdownTimeout
    const limits = yield* connectionLimits
    const route = yield* front
    if (route === undefined) return NodeHttpServer.layerConfig(() => drainingServer(deadline, limits), options)
    const listen = yield* Config.all(options)
    return Layer.mergeAll(
      Layer.scoped(HttpServer.HttpServer, frontedServer(drainingServer(deadline, limits), route, listen)),
      NodeHttpServer.layerContext
    )
  }))
