// Reference pass-through proxy (docs/performance.md, "Targets"): node:http in front, undici to the upstream,
// the request body streamed through and the answer piped back, as a plain Node hop is written.
// Run as a child process: `UPSTREAM_URL=... node --import tsx bench/referenceProxy.ts`.
import { createServer } from "node:http"
import { pipeline } from "node:stream"
import { Agent, request } from "undici"
import { serveAsChild } from "./child.js"

const upstream = new URL(process.env.UPSTREAM_URL ?? "http://127.0.0.1:9999")
const dispatcher = new Agent({ keepAliveTimeout: 60_000, connections: 1024 })
/** Hop-by-hop headers stay on their own hop. */
const HOP = new Set(["host", "connection", "keep-alive", "transfer-encoding", "upgrade", "proxy-connection"])

const server = createServer((req, res) => {
  if (req.method !== "POST" || req.url !== "/v1/chat/completions") {
    res.writeHead(404).end()
    return
  }
  const headers = Object.fromEntries(Object.entries(req.headers).filter(([name]) => !HOP.has(name)))
  request(new URL(req.url, upstream), { method: "POST", headers, body: req, dispatcher }).then(
    (answer) => {
      const back = Object.fromEntries(Object.entries(answer.headers).filter(([name]) => !HOP.has(name)))
      res.writeHead(answer.statusCode, back as Record<string, string | Array<string>>)
      pipeline(answer.body, res, () => {})
    },
    () => (res.headersSent ? res.destroy() : res.writeHead(502).end())
  )
})
serveAsChild(server)
