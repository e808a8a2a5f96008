// Answers of third-party APIs are read up to a cap, not whole: a capability provider's body
// (layers/capabilities/ProviderCall.ts) and a tool app's API answer (layers/tools/apps/Http.ts).
// A server that would answer 1 GiB (made lazily) sees its socket closed far below that.
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { callProvider } from "../../layers/capabilities/ProviderCall.js"
import { callApi, MAX_APP_ANSWER_BYTES } from "../../layers/tools/apps/Http.js"

const GIB = 1024 ** 3
const FILL = Buffer.alloc(64 * 1024, "a")

interface Huge {
  readonly url: string
  /** Bytes the socket accepted before the client left (or the answer ended). */
  readonly written: () => number
  readonly closedEarly: () => boolean
}

/** A server answering `status` with `head` then up to 1 GiB of letters, written under backpressure. */
const hugeServer = (status: number, head: string) =>
  Effect.acquireRelease(
    Effect.promise(() =>
      new Promise<Huge & { readonly server: http.Server }>((resolve) => {
        let written = 0
        let closedEarly = false
        const server = http.createServer((_req, res) => {
          res.writeHead(status, { "content-type": "application/json" })
          res.on("close", () => {
            if (!res.writableFinished) closedEarly = true
          })
          written += head.length
          res.write(head)
          let left = GIB
          const pump = () => {
            while (left > 0 && !res.destroyed) {
              left -= FILL.length
              written += FILL.length
              if (!res.write(FILL)) return void res.once("drain", pump)
            }
            if (!res.destroyed) res.end("\"}")
          }
          pump()
        })
        server.listen(0, "127.0.0.1", () =>
          resolve({
            server,
            url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
            written: () => written,
            closedEarly: () => closedEarly
          }))
      })
    ),
    ({ server }) =>
      Effect.promise(() =>
        new Promise<void>((resolve) => {
          server.closeAllConnections()
          server.close(() => resolve())
        })
      )
  )

const waitUntil = (condition: () => boolean) =>
  Effect.promise(async () => {
    for (let i = 0; i < 200 && !condition(); i++) await new Promise((r) => setTimeout(r, 10))
  })

describe("capability provider bodies", () => {
  it.scopedLive("a 1 GiB answer is cut at the cap: no answer, and the socket closed early", () =>
    Effect.gen(function*() {
      const huge = yield* hugeServer(200, "{\"result\":\"")
      const [outcome] = yield* callProvider({ url: `${huge.url}/run`, method: "POST", input: {}, runId: "r1", timeoutMs: 30_000, allowPrivate: true })
      expect(outcome).toMatchObject({ _tag: "NoAnswer", kind: "connection_error" })
      expect(outcome._tag === "NoAnswer" && outcome.message).toMatch(/exceeds/)
      yield* waitUntil(huge.closedEarly)
      expect(huge.closedEarly()).toBe(true)
      expect(huge.written()).toBeLessThan(64 * 1024 * 1024)
    }))
})

describe("tool app API bodies", () => {
  it.scopedLive("a 1 GiB answer fails the call at the cap, and the socket is closed early", () =>
    Effect.gen(function*() {
      const huge = yield* hugeServer(200, "{\"items\":\"")
      const error = yield* Effect.flip(callApi({ apiUrl: huge.url, accessToken: "t" }, { method: "GET", path: "/items" }))
      expect(error).toMatchObject({ _tag: "AppApiError", message: `provider answer exceeds ${MAX_APP_ANSWER_BYTES} bytes` })
      yield* waitUntil(huge.closedEarly)
      expect(huge.closedEarly()).toBe(true)
      expect(huge.written()).toBeLessThan(64 * 1024 * 1024)
    }))

  it.scopedLive("of a 1 GiB error answer only a prefix is read for its message", () =>
    Effect.gen(function*() {
      const huge = yield* hugeServer(500, "{\"message\":\"server on fire\",\"padding\":\"")
      const error = yield* Effect.flip(callApi({ apiUrl: huge.url, accessToken: "t" }, { method: "GET", path: "/items" }))
      expect(error).toMatchObject({ _tag: "AppApiError", status: 500 })
      expect(error.message).toContain("provider answered 500")
      yield* waitUntil(huge.closedEarly)
      expect(huge.closedEarly()).toBe(true)
      expect(huge.written()).toBeLessThan(16 * 1024 * 1024)
    }))
})
