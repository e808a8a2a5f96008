// The platform's side of the OAuth flow: a real node:http server standing in for {base_url},
// recording every visit to /mcp/oauth-callback (the landing route platforms implement), nonce included.
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"

export interface LandingVisit {
  readonly app: string | null
  readonly status: string | null
  readonly error: string | null
  readonly error_description: string | null
  /** The platform's nonce echoed by the gateway (null when the flow was started without one). */
  readonly nonce: string | null
}

export interface OAuthLanding {
  readonly url: string
  readonly visits: Array<LandingVisit>
  readonly close: () => Promise<void>
}

export const startOAuthLanding = async (): Promise<OAuthLanding> => {
  const visits: Array<LandingVisit> = []
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://landing.local")
    if (url.pathname !== "/mcp/oauth-callback") {
      res.writeHead(404).end()
      return
    }
    const q = url.searchParams
    visits.push({ app: q.get("app"), status: q.get("status"), error: q.get("error"), error_description: q.get("error_description"), nonce: q.get("nonce") })
    res.writeHead(200, { "content-type": "text/html" }).end("<p>Thanks, you can close this window.</p>")
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    visits,
    close: () => new Promise<void>((resolve) => server.close(() => resolve()))
  }
}
