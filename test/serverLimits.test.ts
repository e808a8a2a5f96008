// Slow and greedy clients on both listeners (API and tool service): a request whose headers or
// body never finish loses its connection at GATEWAY_HEADERS_TIMEOUT / GATEWAY_REQUEST_TIMEOUT
// while other clients are served, an answer (an SSE stream) is not bound by those deadlines, and
// GATEWAY_MAX_CONNECTIONS closes connections beyond the cap. Raw sockets, real gateways.
import { connect, type Socket } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { createEndUser, type Gateway, provisionOpenAiModel, startGateway } from "./support/Gateway.js"

/** A raw TCP connection to a listener: what it received, and whether the server closed it. */
interface Raw {
  readonly socket: Socket
  readonly received: () => string
  readonly closed: () => boolean
  /** Waits until `done()` holds or `boundMs` passes; returns whether it held. */
  readonly until: (done: () => boolean, boundMs?: number) => Promise<boolean>
}

const open = (baseUrl: string): Promise<Raw> =>
  new Promise((resolve, reject) => {
    const url = new URL(baseUrl)
    const socket = connect(Number(url.port), url.hostname)
    let received = ""
    let closed = false
    const waiters = new Set<() => void>()
    const wake = () => {
      for (const w of waiters) w()
    }
    socket.setEncoding("utf8")
    socket.on("data", (text: string) => {
      received += text
      wake()
    })
    socket.on("error", () => undefined) // a reset is a close here
    socket.on("close", () => {
      closed = true
      wake()
    })
    socket.once("connect", () =>
      resolve({
        socket,
        received: () => received,
        closed: () => closed,
        until: (done, boundMs = 10_000) =>
          new Promise<boolean>((settle) => {
            if (done()) return settle(true)
            const finish = (result: boolean) => {
              clearTimeout(timer)
              waiters.delete(check)
              settle(result)
            }
            const check = () => {
              if (done()) finish(true)
            }
            const timer = setTimeout(() => finish(done()), boundMs)
            waiters.add(check)
          })
      })
    )
    socket.once("error", reject)
  })

const healthRequest = "GET /health HTTP/1.1\r\nHost: gateway\r\n\r\n"
const answeredOk = (raw: Raw) => () => /^HTTP\/1\.1 200 /.test(raw.received()) && raw.received().includes(`{"status":"ok"}`)

/** The server closed the connection, answering 408 or nothing at all. */
const expectClosedByServer = async (raw: Raw) => {
  expect(await raw.until(raw.closed)).toBe(true)
  expect(raw.received() === "" || raw.received().startsWith("HTTP/1.1 408 ")).toBe(true)
}

describe("request deadlines", () => {
  let gw: Gateway
  let upstream: FakeUpstream
  let endUserKey: string
  beforeAll(async () => {
    upstream = await startFakeOpenAi()
    gw = await startGateway({
      env: { GATEWAY_ALLOW_PRIVATE_URLS: "true", GATEWAY_HEADERS_TIMEOUT: "500ms", GATEWAY_REQUEST_TIMEOUT: "1s" }
    })
    const platform = await provisionOpenAiModel(gw, upstream.url, { provider: "slow", model: "slow-model" })
    endUserKey = (await createEndUser(gw, platform.platformId, platform.platformKey, "limits")).endUserKey
  })
  afterAll(async () => {
    await gw?.close()
    await upstream?.close()
  })

  it("API: a body that stops halfway loses its connection; another client is served meanwhile; nothing is written", async () => {
    const body = JSON.stringify({ name: "Stalled platform" })
    const stalled = await open(gw.baseUrl)
    stalled.socket.write(
      `POST /v1/admin/platforms HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer ${gw.adminKey}\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 10)}`
    )
    const other = await open(gw.baseUrl)
    other.socket.write(healthRequest)
    expect(await other.until(answeredOk(other))).toBe(true)
    await expectClosedByServer(stalled)
    other.socket.destroy()
    const rows = await gw.db.pool.query("SELECT count(*)::int AS n FROM platforms WHERE name = 'Stalled platform'")
    expect(rows.rows[0].n).toBe(0)
  })

  it("API: headers that never finish lose their connection", async () => {
    const stalled = await open(gw.baseUrl)
    stalled.socket.write(`GET /health HTTP/1.1\r\nHost: gateway\r\nX-Slow: `)
    await expectClosedByServer(stalled)
  })

  it("API: an SSE answer that lasts well past the request deadline runs to its end", async () => {
    const reply = "one two three four five six seven eight"
    upstream.setBehavior({ reply, chunkDelayMs: 400 }) // about 3 s of streaming, the request deadline is 1 s
    const response = await fetch(`${gw.baseUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${endUserKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "slow-model", stream: true, messages: [{ role: "user", content: "slowly" }] })
    })
    expect(response.status).toBe(200)
    const text = await response.text()
    expect(text).toContain("data: [DONE]")
    const content = text.split("\n").filter((l) => l.startsWith("data: {")).map((l) => JSON.parse(l.slice(6)))
      .flatMap((c) => c.choices.map((choice: any) => choice.delta?.content ?? "")).join("")
    expect(content).toBe(reply)
    upstream.setBehavior({})
  })

  it("tool service: a stalled body and unfinished headers lose their connections; another client is served", async () => {
    const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: {} })
    const stalledBody = await open(gw.toolsUrl)
    stalledBody.socket.write(
      `POST /mcp/some-app HTTP/1.1\r\nHost: tools\r\nAuthorization: Bearer ${endUserKey}\r\n` +
        `Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 12)}`
    )
    const stalledHeaders = await open(gw.toolsUrl)
    stalledHeaders.socket.write(`GET /apps HTTP/1.1\r\nHost: tools\r\nAuthorization: Bearer ${endUserKey}\r\n`)
    const other = await open(gw.toolsUrl)
    other.socket.write(healthRequest)
    expect(await other.until(answeredOk(other))).toBe(true)
    await expectClosedByServer(stalledBody)
    await expectClosedByServer(stalledHeaders)
    other.socket.destroy()
  })
})

describe("connection cap", () => {
  let gw: Gateway
  const opened: Array<Raw> = []
  beforeAll(async () => {
    gw = await startGateway({ env: { GATEWAY_MAX_CONNECTIONS: "3" } })
  })
  afterAll(async () => {
    for (const raw of opened) raw.socket.destroy()
    await gw?.close()
  })

  const served = async (baseUrl: string) => {
    const raw = await open(baseUrl)
    opened.push(raw)
    raw.socket.write(healthRequest)
    await raw.until(() => answeredOk(raw)() || raw.closed())
    return { raw, answered: answeredOk(raw)() }
  }

  for (const listener of ["api", "tools"] as const) {
    it(`${listener}: connections within the cap are served and kept, the one beyond it is closed unanswered, and a freed slot serves again`, async () => {
      const url = listener === "api" ? gw.baseUrl : gw.toolsUrl
      const within = [await served(url), await served(url), await served(url)]
      expect(within.map((c) => c.answered)).toEqual([true, true, true])
      const beyond = await served(url)
      expect(beyond.answered).toBe(false)
      expect(beyond.raw.closed()).toBe(true)
      expect(beyond.raw.received()).toBe("")
      // The ones within the cap are still open and still serve (keep-alive).
      for (const c of within) {
        expect(c.raw.closed()).toBe(false)
        const before = c.raw.received().length
        c.raw.socket.write(healthRequest)
        expect(await c.raw.until(() => c.raw.received().length > before && c.raw.received().slice(before).includes(`{"status":"ok"}`))).toBe(true)
      }
      // Free one slot: a new connection is served once the server has seen the close.
      within[0]!.raw.socket.destroy()
      let again = false
      for (let attempt = 0; attempt < 50 && !again; attempt++) {
        again = (await served(url)).answered
        if (!again) await new Promise((resolve) => setTimeout(resolve, 100))
      }
      expect(again).toBe(true)
      for (const raw of opened) raw.socket.destroy()
      opened.length = 0
    })
  }
})
