// A capability provider as a vendor would run one: a real node:http server on 127.0.0.1 that
// answers JSON per path (success, error, slow, delayed, own `ok:false`) and records every call.
import { createServer, type IncomingHttpHeaders } from "node:http"
import type { AddressInfo } from "node:net"

export interface ProviderCall {
  readonly method: string
  readonly path: string
  readonly query: Record<string, string>
  readonly headers: IncomingHttpHeaders
  readonly body: unknown
}

export interface FakeCapabilityProvider {
  readonly url: string
  readonly calls: Array<ProviderCall>
  readonly close: () => Promise<void>
}

/**
 * Paths: `/ok` (200 `{ok:true, echo}`), `/okfalse` (200 `{ok:false}`), `/fail` (500),
 * `/slow` (answers after 5 s), `/delay?ms=N` (200 after N ms), `/echo-headers` (200 with the
 * request's headers in the body, as a careless provider might). `?cost=X` on any path sets the
 * `x-cost-usd` response header.
 */
export const startFakeCapabilityProvider = async (): Promise<FakeCapabilityProvider> => {
  const calls: Array<ProviderCall> = []
  const timers = new Set<NodeJS.Timeout>()
  const server = createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      const url = new URL(req.url ?? "/", "http://fake")
      const text = Buffer.concat(chunks).toString("utf8")
      let body: unknown = null
      try {
        body = text === "" ? null : JSON.parse(text)
      } catch {
        body = text
      }
      const query = Object.fromEntries(url.searchParams)
      calls.push({ method: req.method ?? "", path: url.pathname, query, headers: req.headers, body })
      const headers: Record<string, string> = { "content-type": "application/json" }
      if (query.cost !== undefined) headers["x-cost-usd"] = query.cost
      const answer = (status: number, payload: unknown) => {
        if (res.destroyed) return
        res.writeHead(status, headers)
        res.end(JSON.stringify(payload))
      }
      const later = (ms: number, f: () => void) => {
        const t = setTimeout(() => {
          timers.delete(t)
          f()
        }, ms)
        timers.add(t)
      }
      switch (url.pathname) {
        case "/ok":
          return answer(200, { ok: true, echo: body, method: req.method, query })
        case "/echo-headers":
          return answer(200, { ok: true, headers: req.headers, raw: req.rawHeaders.join("\n") })
        case "/okfalse":
          return answer(200, { ok: false, reason: "no results" })
        case "/fail":
          return answer(500, { error: "boom" })
        case "/slow":
          return later(5000, () => answer(200, { ok: true, late: true }))
        case "/delay":
          return later(Number(query.ms ?? "100"), () => answer(200, { ok: true, delayed: true }))
        default:
          return answer(404, { error: "no such path" })
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    calls,
    close: async () => {
      for (const t of timers) clearTimeout(t)
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}
