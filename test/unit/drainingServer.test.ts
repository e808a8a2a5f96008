// The listeners' node:http server without the gateway: the connection limits reach Node's
// settings (and a headers deadline past the request deadline is refused at start), and a forced
// stop cuts a drain at once instead of at its deadline.
import { ConfigProvider, Duration, Effect, Either } from "effect"
import { request } from "node:http"
import type { AddressInfo } from "node:net"
import { describe, expect, it } from "vitest"
import { connectionLimits, cutDrainingConnections, drainingServer } from "../../src/http/DrainingServer.js"

const limitsFrom = (env: Record<string, string>) =>
  Effect.runSync(Effect.either(Effect.withConfigProvider(connectionLimits, ConfigProvider.fromMap(new Map(Object.entries(env))))))

describe("connection limits", () => {
  it("defaults: 20 s for headers, 60 s for a whole request, 5 s keep-alive, 10,000 connections", () => {
    expect(limitsFrom({})).toEqual(Either.right({ headersTimeoutMs: 20_000, requestTimeoutMs: 60_000, keepAliveTimeoutMs: 5_000, maxConnections: 10_000 }))
  })

  it("are what the server is created with", () => {
    const limits = { headersTimeoutMs: 1_500, requestTimeoutMs: 4_000, keepAliveTimeoutMs: 2_500, maxConnections: 7 }
    expect(limitsFrom({ GATEWAY_HEADERS_TIMEOUT: "1.5s", GATEWAY_REQUEST_TIMEOUT: "4s", GATEWAY_KEEPALIVE_TIMEOUT: "2500", GATEWAY_MAX_CONNECTIONS: "7" }))
      .toEqual(Either.right(limits))
    const server = drainingServer(Duration.seconds(1), limits)
    expect({
      headersTimeoutMs: server.headersTimeout,
      requestTimeoutMs: server.requestTimeout,
      keepAliveTimeoutMs: server.keepAliveTimeout,
      maxConnections: server.maxConnections
    }).toEqual(limits)
  })

  it("refuses a headers deadline past the request deadline, and nonsense, naming the variable", () => {
    const late = limitsFrom({ GATEWAY_HEADERS_TIMEOUT: "90s", GATEWAY_REQUEST_TIMEOUT: "60s" })
    expect(Either.isLeft(late) && String(late.left)).toMatch(/GATEWAY_HEADERS_TIMEOUT.*at most GATEWAY_REQUEST_TIMEOUT/)
    const zero = limitsFrom({ GATEWAY_MAX_CONNECTIONS: "0" })
    expect(Either.isLeft(zero) && String(zero.left)).toMatch(/GATEWAY_MAX_CONNECTIONS/)
    const words = limitsFrom({ GATEWAY_REQUEST_TIMEOUT: "forever" })
    expect(Either.isLeft(words) && String(words.left)).toMatch(/GATEWAY_REQUEST_TIMEOUT/)
  })
})

describe("forced stop", () => {
  const limits = { headersTimeoutMs: 20_000, requestTimeoutMs: 60_000, keepAliveTimeoutMs: 5_000, maxConnections: 100 }

  /** A draining server (60 s deadline) whose handler never answers; resolves once a request is in flight. */
  const busyServer = async () => {
    const server = drainingServer(Duration.seconds(60), limits)
    let arrived!: () => void
    const inFlight = new Promise<void>((resolve) => (arrived = resolve))
    server.on("request", () => arrived()) // never answers: a stream that would outlive the deadline
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    const port = (server.address() as AddressInfo).port
    const client = new Promise<string>((resolve) => {
      const req = request({ host: "127.0.0.1", port, path: "/stream" }, (res) => {
        res.resume()
        res.on("close", () => resolve("closed"))
      })
      req.on("error", () => resolve("closed"))
      req.end()
    })
    await inFlight
    return { server, client }
  }

  it("cuts the connections of a draining server at once, and of one that starts draining afterwards", async () => {
    const first = await busyServer()
    const second = await busyServer()
    const closedFirst = new Promise<void>((resolve) => first.server.close(() => resolve()))
    cutDrainingConnections()
    await closedFirst
    expect(await first.client).toBe("closed")
    // After the forced stop, a drain that begins later does not wait for its deadline either.
    await new Promise<void>((resolve) => second.server.close(() => resolve()))
    expect(await second.client).toBe("closed")
  })
})
