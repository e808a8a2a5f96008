// A webhook receiver as a tenant would write one: a real node:http server on 127.0.0.1 that
// verifies every request with `standardwebhooks` (400 when invalid) and records what it got.
import { createServer, type IncomingHttpHeaders, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { Webhook } from "standardwebhooks"

export interface ReceivedEvent {
  readonly headers: IncomingHttpHeaders
  readonly rawBody: string
  /** The verified, parsed body. */
  readonly body: any
}

export interface ReceiverOptions {
  /** Answer 500 to the first N requests (they are still counted in `requests`). */
  readonly failFirst?: number
  /** Status for every request (after the failFirst ones); default 200. */
  readonly status?: number
  /** Answer this long after a request's body arrived (a slow receiver). */
  readonly delayMs?: number
  /** Hold every request unanswered until `release()` (a hanging receiver); `close()` cuts them. */
  readonly hang?: boolean
}

export interface WebhookReceiver {
  readonly url: string
  /** Set once the endpoint is registered (the secret comes from the registration response). */
  secret: string | undefined
  /** Verified deliveries answered with 2xx, in arrival order. */
  readonly events: Array<ReceivedEvent>
  /** Every request seen (verified or not), with the status we answered. */
  readonly requests: Array<{ readonly status: number; readonly headers: IncomingHttpHeaders }>
  readonly invalid: Array<string>
  /** Requests whose body arrived, answered or not yet (with `delayMs` or `hang`). */
  arrived: number
  /** Requests whose body arrived and that are neither answered nor closed by the sender: in flight now. */
  open: number
  /** The most requests that were in flight at once. */
  peakOpen: number
  /** Requests the sender gave up on (closed the connection) before an answer. */
  abandoned: number
  /** With `hang`: answers every request held so far (as the receiver would have, status rules included). */
  readonly release: () => void
  readonly waitFor: (predicate: (r: WebhookReceiver) => boolean, timeoutMs?: number) => Promise<void>
  readonly close: () => Promise<void>
}

export const startReceiver = async (options: ReceiverOptions = {}): Promise<WebhookReceiver> => {
  let failuresLeft = options.failFirst ?? 0
  const receiver: WebhookReceiver = {
    url: "",
    secret: undefined,
    events: [],
    requests: [],
    invalid: [],
    arrived: 0,
    open: 0,
    peakOpen: 0,
    abandoned: 0,
    release: () => {
      for (const answer of held.splice(0)) answer()
    },
    waitFor: async (predicate, timeoutMs = 10_000) => {
      const deadline = Date.now() + timeoutMs
      while (!predicate(receiver)) {
        if (Date.now() > deadline) {
          throw new Error(`receiver: condition not met within ${timeoutMs} ms (${receiver.requests.length} requests)`)
        }
        await new Promise((r) => setTimeout(r, 25))
      }
    },
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections() // held requests would keep close() waiting forever
      })
  }
  const held: Array<() => void> = []
  const server: Server = createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    let inFlight = false // the body arrived and neither side has closed the exchange yet
    req.on("end", () => {
      inFlight = true
      receiver.arrived++
      receiver.open++
      receiver.peakOpen = Math.max(receiver.peakOpen, receiver.open)
      if (options.hang === true) held.push(answer)
      else if (options.delayMs === undefined) answer()
      else setTimeout(answer, options.delayMs)
    })
    res.on("close", () => {
      if (!inFlight) return // answered already, or closed before the body arrived
      inFlight = false
      receiver.open--
      receiver.abandoned++
    })
    const answer = () => {
      if (!inFlight) return
      inFlight = false
      receiver.open--
      const rawBody = Buffer.concat(chunks).toString("utf8")
      let status: number
      let body: unknown
      try {
        if (receiver.secret === undefined) throw new Error("no secret configured")
        // Verify before processing, exactly as the spec asks receivers to.
        body = new Webhook(receiver.secret).verify(rawBody, req.headers as Record<string, string>)
        if (failuresLeft > 0) {
          failuresLeft--
          status = 500
        } else {
          status = options.status ?? 200
        }
      } catch (e) {
        receiver.invalid.push(String(e))
        status = 400
      }
      receiver.requests.push({ status, headers: req.headers })
      if (status >= 200 && status < 300) receiver.events.push({ headers: req.headers, rawBody, body })
      res.writeHead(status, { "content-type": "application/json" })
      res.end(JSON.stringify({ ok: status < 300 }))
    }
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()))
  const { port } = server.address() as AddressInfo
  ;(receiver as { url: string }).url = `http://127.0.0.1:${port}/hooks`
  return receiver
}
