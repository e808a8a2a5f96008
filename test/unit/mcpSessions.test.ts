// The MCP session rules without HTTP: real SDK transports fed web-standard Requests, stub tool
// handlers, the session rows on a fresh database, and TestClock for the idle time and lifetime.
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, TestClock } from "effect"
import { randomUUID } from "node:crypto"
import type { EndUserPrincipal } from "../../layers/access/KeyAuth.js"
import { DatabaseLive } from "../../layers/platform/Database.js"
import { makeMcpSessions, MAX_SESSIONS_PER_KEY, type SessionLimits } from "../../layers/tools/McpSessions.js"
import { TestDatabaseUrlLive } from "../support/TestDatabase.js"

const IDLE = 60_000
const limits = (over: Partial<SessionLimits> = {}): SessionLimits => ({
  ttlMillis: 3_600_000,
  idleMillis: IDLE,
  maxSessions: 100,
  maxPerPlatform: 100,
  ...over
})

/** Ids are uuids in the table: each name stands for one, the same within a file. */
const uuids = new Map<string, string>()
const uuidOf = (name: string) => {
  const id = uuids.get(name) ?? randomUUID()
  uuids.set(name, id)
  return id
}

const user = (platform: string, key: string): EndUserPrincipal => ({
  _tag: "EndUserKey",
  keyId: uuidOf(`key ${key}`),
  platformId: uuidOf(`platform ${platform}`),
  endUserId: uuidOf(`user ${key}`),
  scopes: ["inference"]
})

const platformOf = (platform: string) => uuidOf(`platform ${platform}`)

/** Every test starts with no session in the shared table (the fleet cap counts them all). */
const noSessions = Effect.flatMap(SqlClient.SqlClient, (sql) => sql`DELETE FROM mcp_sessions`)

const handlers = {
  listTools: async () => [{ name: "echo", description: "echo", inputSchema: { type: "object" as const, properties: {} } }],
  callTool: async () => ({ content: [{ type: "text" as const, text: "ok" }] })
}

const headers = (sessionId?: string): Record<string, string> => ({
  "content-type": "application/json",
  accept: "application/json, text/event-stream",
  ...(sessionId === undefined ? {} : { "mcp-session-id": sessionId, "mcp-protocol-version": "2025-03-26" })
})

const initBody = {
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-03-26", capabilities: {}, clientInfo: { name: "unit", version: "1" } }
}

const post = (body: unknown, sessionId?: string) =>
  new Request("http://tools.local/mcp/github", { method: "POST", headers: headers(sessionId), body: JSON.stringify(body) })

type Sessions = Effect.Effect.Success<ReturnType<typeof makeMcpSessions>>

/** An initialize; the answer's status, session id, retry-after and (for refusals) body. */
const initialize = (sessions: Sessions, principal: EndUserPrincipal) =>
  Effect.gen(function*() {
    const res = yield* sessions.handle(principal, "github", post(initBody), initBody)
    const text = yield* Effect.promise(() => res.text())
    return {
      status: res.status,
      sessionId: res.headers.get("mcp-session-id"),
      retryAfter: res.headers.get("retry-after"),
      body: res.status === 200 ? null : JSON.parse(text)
    }
  })

const listTools = (sessions: Sessions, principal: EndUserPrincipal, sessionId: string) =>
  Effect.gen(function*() {
    const body = { jsonrpc: "2.0", id: 2, method: "tools/list", params: {} }
    const res = yield* sessions.handle(principal, "github", post(body, sessionId), body)
    yield* Effect.promise(() => res.text())
    return res.status
  })

const TestLayer = DatabaseLive.pipe(Layer.provide(TestDatabaseUrlLive))

layer(TestLayer, { timeout: "60 seconds" })("MCP sessions", (it) => {
  it.effect("per-platform cap: the next initialize of that platform is 429 with retry-after; other platforms still open", () =>
    Effect.gen(function*() {
      yield* noSessions
      const sessions = yield* makeMcpSessions(limits({ maxPerPlatform: 2 }), handlers)
      expect((yield* initialize(sessions, user("A", "a1"))).status).toBe(200)
      expect((yield* initialize(sessions, user("A", "a2"))).status).toBe(200)
      const refused = yield* initialize(sessions, user("A", "a3"))
      expect(refused.status).toBe(429)
      expect(refused.sessionId).toBeNull()
      expect(refused.retryAfter).toBe(String(IDLE / 1000))
      expect(refused.body).toEqual({
        error: { message: expect.stringContaining("open MCP sessions"), type: "rate_limit_error", code: "rate_limit_exceeded", param: null }
      })
      expect((yield* initialize(sessions, user("B", "b1"))).status).toBe(200)
      expect([yield* sessions.count(platformOf("A")), yield* sessions.count(platformOf("B")), yield* sessions.count()]).toEqual([2, 1, 3])
    }))

  it.effect("fleet cap: beyond it initialize is 503 for every platform", () =>
    Effect.gen(function*() {
      yield* noSessions
      const sessions = yield* makeMcpSessions(limits({ maxSessions: 3 }), handlers)
      for (const p of ["A", "B", "C"]) expect((yield* initialize(sessions, user(p, `${p}1`))).status).toBe(200)
      const full = yield* initialize(sessions, user("D", "d1"))
      expect(full.status).toBe(503)
      expect(full.body.error).toMatchObject({ type: "api_error", code: "service_unavailable" })
      expect(Number(full.retryAfter)).toBeGreaterThanOrEqual(1)
      expect(yield* sessions.count()).toBe(3)
    }))

  it.effect("concurrent initializes cannot all take the same free slot", () =>
    Effect.gen(function*() {
      yield* noSessions
      const sessions = yield* makeMcpSessions(limits({ maxPerPlatform: 2 }), handlers)
      const results = yield* Effect.all(
        Array.from({ length: 6 }, (_, i) => initialize(sessions, user("A", `k${i}`))),
        { concurrency: "unbounded" }
      )
      expect(results.map((r) => r.status).sort()).toEqual([200, 200, 429, 429, 429, 429])
      expect(yield* sessions.count(platformOf("A"))).toBe(2)
    }))

  it.effect("DELETE frees the slot", () =>
    Effect.gen(function*() {
      yield* noSessions
      const sessions = yield* makeMcpSessions(limits({ maxPerPlatform: 1 }), handlers)
      const first = yield* initialize(sessions, user("A", "a1"))
      expect((yield* initialize(sessions, user("A", "a2"))).status).toBe(429)
      const del = new Request("http://tools.local/mcp/github", { method: "DELETE", headers: headers(first.sessionId!) })
      expect((yield* sessions.handle(user("A", "a1"), "github", del, undefined)).status).toBe(200)
      expect(yield* sessions.count(platformOf("A"))).toBe(0)
      expect((yield* initialize(sessions, user("A", "a2"))).status).toBe(200)
    }))

  it.effect("an idle session is closed on access (404) and by the reaper; requests keep a session alive", () =>
    Effect.gen(function*() {
      yield* noSessions
      const sessions = yield* makeMcpSessions(limits(), handlers)
      const a = user("A", "a1")
      const kept = (yield* initialize(sessions, a)).sessionId!
      const idle = (yield* initialize(sessions, a)).sessionId!
      const reaped = (yield* initialize(sessions, a)).sessionId!
      yield* TestClock.adjust(IDLE - 1)
      expect(yield* listTools(sessions, a, kept)).toBe(200) // a request: idle time starts again
      yield* TestClock.adjust(1)
      expect(yield* sessions.count()).toBe(3) // nothing closes by itself between reaps
      expect(yield* listTools(sessions, a, idle)).toBe(404)
      expect(yield* sessions.count()).toBe(2)
      yield* sessions.reap
      expect(yield* sessions.count()).toBe(1)
      expect(yield* listTools(sessions, a, reaped)).toBe(404)
      expect(yield* listTools(sessions, a, kept)).toBe(200)
    }))

  it.effect("at the cap, idle sessions of the platform make room for a new one", () =>
    Effect.gen(function*() {
      yield* noSessions
      const sessions = yield* makeMcpSessions(limits({ maxPerPlatform: 2 }), handlers)
      yield* initialize(sessions, user("A", "a1"))
      yield* initialize(sessions, user("A", "a2"))
      const refused = yield* initialize(sessions, user("A", "a3"))
      expect(refused.status).toBe(429)
      yield* TestClock.adjust(Number(refused.retryAfter) * 1000)
      expect((yield* initialize(sessions, user("A", "a3"))).status).toBe(200)
      expect(yield* sessions.count(platformOf("A"))).toBe(1)
    }))

  it.effect("the absolute lifetime applies even to a session in use", () =>
    Effect.gen(function*() {
      yield* noSessions
      const sessions = yield* makeMcpSessions(limits({ ttlMillis: 2 * IDLE }), handlers)
      const a = user("A", "a1")
      const id = (yield* initialize(sessions, a)).sessionId!
      for (let i = 0; i < 3; i++) {
        yield* TestClock.adjust(IDLE / 2)
        expect(yield* listTools(sessions, a, id)).toBe(200)
      }
      yield* TestClock.adjust(IDLE / 2) // never idle, but two idle times old
      expect(yield* listTools(sessions, a, id)).toBe(404)
    }))

  it.effect("a tool call in progress keeps its session past the idle time", () =>
    Effect.gen(function*() {
      yield* noSessions
      const started = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const sessions = yield* makeMcpSessions(limits(), {
        ...handlers,
        callTool: async () => {
          await Effect.runPromise(Deferred.succeed(started, undefined))
          await Effect.runPromise(Deferred.await(release))
          return { content: [{ type: "text" as const, text: "slow" }] }
        }
      })
      const a = user("A", "a1")
      const id = (yield* initialize(sessions, a)).sessionId!
      const call = { jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "echo", arguments: {} } }
      const running = yield* Effect.fork(
        sessions.handle(a, "github", post(call, id), call).pipe(Effect.flatMap((res) => Effect.promise(() => res.text())))
      )
      yield* Deferred.await(started)
      yield* TestClock.adjust(2 * IDLE)
      yield* sessions.reap
      expect(yield* sessions.count()).toBe(1)
      yield* Deferred.succeed(release, undefined)
      expect(yield* Fiber.join(running)).toContain("slow")
      // The end of the call counts as activity: the idle time starts again from there.
      yield* TestClock.adjust(IDLE - 1)
      yield* sessions.reap
      expect(yield* sessions.count()).toBe(1)
      yield* TestClock.adjust(1)
      yield* sessions.reap
      expect(yield* sessions.count()).toBe(0)
    }))

  it.effect("a key past its own cap displaces its least recently used session, even at the platform cap", () =>
    Effect.gen(function*() {
      yield* noSessions
      const sessions = yield* makeMcpSessions(limits({ maxPerPlatform: MAX_SESSIONS_PER_KEY }), handlers)
      const a = user("A", "a1")
      const ids: Array<string> = []
      for (let i = 0; i < MAX_SESSIONS_PER_KEY; i++) {
        ids.push((yield* initialize(sessions, a)).sessionId!)
        yield* TestClock.adjust(10)
      }
      expect(yield* listTools(sessions, a, ids[0]!)).toBe(200) // the first is now the most recently used
      yield* TestClock.adjust(10)
      expect((yield* initialize(sessions, a)).status).toBe(200)
      expect(yield* sessions.count(platformOf("A"))).toBe(MAX_SESSIONS_PER_KEY)
      expect(yield* listTools(sessions, a, ids[1]!)).toBe(404)
      expect(yield* listTools(sessions, a, ids[0]!)).toBe(200)
      // Another key of the platform is refused: the cap is the platform's.
      expect((yield* initialize(sessions, user("A", "a2"))).status).toBe(429)
    }))

  it.effect("a session outlives the table that opened it: another instance serves it, a DELETE there ends it everywhere", () =>
    Effect.gen(function*() {
      yield* noSessions
      const [a, b] = [yield* makeMcpSessions(limits(), handlers), yield* makeMcpSessions(limits(), handlers)]
      const k = user("A", "a1")
      const id = (yield* initialize(a, k)).sessionId!
      expect(yield* listTools(b, k, id)).toBe(200)
      // The binding is to the key (another key of the same user too) and to the app.
      expect(yield* listTools(b, { ...k, keyId: randomUUID() }, id)).toBe(404)
      const elsewhere = yield* b.handle(k, "slack", post({ jsonrpc: "2.0", id: 2, method: "tools/list", params: {} }, id), undefined)
      expect(elsewhere.status).toBe(404)
      // No server-initiated stream; initialize again on a live session is refused.
      const get = yield* b.handle(k, "github", new Request("http://tools.local/mcp/github", { method: "GET", headers: headers(id) }), undefined)
      expect([get.status, get.headers.get("allow")]).toEqual([405, "POST, DELETE"])
      const again = yield* b.handle(k, "github", post(initBody, id), initBody)
      expect(again.status).toBe(400)
      const del = new Request("http://tools.local/mcp/github", { method: "DELETE", headers: headers(id) })
      expect((yield* b.handle(k, "github", del, undefined)).status).toBe(200)
      expect(yield* listTools(a, k, id)).toBe(404)
      expect((yield* a.handle(k, "github", del, undefined)).status).toBe(404)
      expect(yield* a.count()).toBe(0)
    }))

  it.effect("the idle time and lifetime are the session's own: an instance with longer limits refuses it too", () =>
    Effect.gen(function*() {
      yield* noSessions
      const opener = yield* makeMcpSessions(limits({ ttlMillis: 3 * IDLE }), handlers)
      const lenient = yield* makeMcpSessions(limits({ ttlMillis: 100 * IDLE, idleMillis: 10 * IDLE }), handlers)
      const k = user("A", "a1")
      const idle = (yield* initialize(opener, k)).sessionId!
      const used = (yield* initialize(opener, k)).sessionId!
      yield* TestClock.adjust(IDLE / 2)
      expect(yield* listTools(lenient, k, used)).toBe(200)
      yield* TestClock.adjust(IDLE / 2)
      expect(yield* listTools(lenient, k, used)).toBe(200)
      expect(yield* listTools(lenient, k, idle)).toBe(404)
      for (let i = 0; i < 3; i++) {
        yield* TestClock.adjust(IDLE / 2)
        expect(yield* listTools(lenient, k, used)).toBe(200)
      }
      yield* TestClock.adjust(IDLE / 2) // three idle times since initialize: past the lifetime
      expect(yield* listTools(lenient, k, used)).toBe(404)
    }))

  it.effect("the caps count the sessions of every instance", () =>
    Effect.gen(function*() {
      yield* noSessions
      const [a, b] = [yield* makeMcpSessions(limits({ maxPerPlatform: 2 }), handlers), yield* makeMcpSessions(limits({ maxPerPlatform: 2 }), handlers)]
      expect((yield* initialize(a, user("A", "a1"))).status).toBe(200)
      expect((yield* initialize(b, user("A", "a2"))).status).toBe(200)
      expect((yield* initialize(a, user("A", "a3"))).status).toBe(429)
      expect((yield* initialize(b, user("A", "a3"))).status).toBe(429)
      expect(yield* b.count(platformOf("A"))).toBe(2)
    }))
})
