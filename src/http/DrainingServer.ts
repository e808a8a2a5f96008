// Graceful shutdown of a listener (SIGTERM/SIGINT): stop accepting connections, let the
// requests in flight finish (streams run to their end) up to GATEWAY_SHUTDOWN_TIMEOUT, then cut
// the rest. A cut stream settles what it emitted (Inference), and the settlement queue drains
// after the listeners have closed (Settlements).
import { NodeHttpServer } from "@effect/platform-node"
import { Config, Duration, Effect, Layer } from "effect"
import { createServer, type Server } from "node:http"

/** How long shutdown waits for requests in flight, then for queued settlements. */
export const shutdownTimeout = Config.duration("GATEWAY_SHUTDOWN_TIMEOUT").pipe(Config.withDefault(Duration.seconds(30)))

/**
 * A node:http server whose close() (what @effect/platform-node calls when the listener's scope
 * closes, then waits for) drains: Node closes idle keep-alive connections at once, busy ones when
 * their response ends, and the deadline closes whatever is still open.
 */
export const drainingServer = (deadline: Duration.Duration): Server => {
  const server = createServer()
  const close = server.close.bind(server)
  server.close = (callback?: (err?: Error) => void) => {
    const cut = setTimeout(() => server.closeAllConnections(), Duration.toMillis(deadline))
    cut.unref()
    return close((err) => {
      clearTimeout(cut)
      callback?.(err)
    })
  }
  return server
}

/** NodeHttpServer.layerConfig over a draining server. */
export const drainingServerLayer = (options: { readonly port: Config.Config<number>; readonly host: Config.Config<string> }) =>
  Layer.unwrapEffect(Effect.map(shutdownTimeout, (deadline) => NodeHttpServer.layerConfig(() => drainingServer(deadline), options)))
