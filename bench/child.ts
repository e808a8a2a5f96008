// What the bench's child servers (mock upstream, proxies) share: listen on PORT (0: any free
// port) on loopback, print the address the bench waits for, and exit when told to or orphaned.
import type { Server } from "node:http"

export const serveAsChild = (server: Server) => {
  server.keepAliveTimeout = 60_000
  server.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => {
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    process.stdout.write(`listening http://127.0.0.1:${port}\n`)
  })
  process.on("SIGTERM", () => server.close(() => process.exit(0)))
  process.on("disconnect", () => process.exit(0))
}
