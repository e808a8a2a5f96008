// The leanest Node hop, reported beside the reference proxy of the targets: node:http on both sides
// (keep-alive), POST /v1/chat/completions forwarded to UPSTREAM_URL and piped back, headers and all.
// Run as a child process: `UPSTREAM_URL=... node --import tsx bench/httpProxy.ts`.
import { Agent, createServer, request } from "node:http"
import { serveAsChild } from "./child.js"

const upstream = new URL(process.env.UPSTREAM_URL ?? "http://127.0.0.1:9999")
const agent = new Agent({ keepAlive: true, maxSockets: 1024, maxFreeSockets: 1024 })

const server = createServer((req, res) => {
  if (req.method !== "POST" || req.url !== "/v1/chat/completions") {
    res.writeHead(404).end()
    return
  }
  const { host: _host, connection: _connection, ...headers } = req.headers
  const forward = request(
    { agent, host: upstream.hostname, port: upstream.port, method: "POST", path: req.url, headers },
    (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers)
      answer.pipe(res)
    }
  )
  forward.on("error", () => res.headersSent ? res.destroy() : res.writeHead(502).end())
  req.pipe(forward)
})
serveAsChild(server)
