// The rows of `mcp_sessions`: the facts of an MCP session that outlive one request, shared by
// every instance. Times are the serving instance's Clock (passed in as `at`), so TestClock drives
// them; clock skew between instances is far below the idle time.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { EndUserPrincipal } from "../access/KeyAuth.js"

/** Clients that never DELETE their sessions cannot pile up more than this per key (least recently used closed first). */
export const MAX_SESSIONS_PER_KEY = 20

/** Session admissions take turns fleet-wide, so parallel initializes cannot take the same free slot. */
const ADMISSION_LOCK = 7_213_381_250

/** What initialize negotiated, kept with the session. */
export interface SessionFacts {
  readonly id: string
  readonly appSlug: string
  readonly protocolVersion: string
  readonly clientInfo: unknown
  readonly clientCapabilities: unknown
}

/** The caps an initialize must fit in, and the lifetime it gets. */
export interface AdmissionLimits {
  readonly ttlMillis: number
  readonly idleMillis: number
  readonly maxSessions: number
  readonly maxPerPlatform: number
}

/** `full` names the cap that refused; `firstDeadline` is when the first session it counts frees its slot. */
export type Admission =
  | { readonly _tag: "Opened" }
  | { readonly _tag: "Refused"; readonly full: "platform" | "fleet"; readonly firstDeadline: number | undefined }

export const makeMcpSessionRows = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient

  /** When a session stops being usable: its lifetime, or its idle time unless a call is running. */
  const deadline = sql`CASE WHEN running > 0 THEN expires_at
    ELSE least(expires_at, last_seen_at + idle_millis * interval '1 millisecond') END`
  const staleAt = (at: number) => sql`(${deadline} <= ${new Date(at)})`

  const firstDeadline = (platformId: string | undefined) =>
    sql<{ readonly first: number | null }>`SELECT (extract(epoch FROM min(${deadline})) * 1000)::float8 AS first
      FROM mcp_sessions ${platformId === undefined ? sql`` : sql`WHERE platform_id = ${platformId}`}`.pipe(
      Effect.map(([row]) => row?.first ?? undefined)
    )

  const counts = (platformId: string) =>
    sql<{ readonly platform: number; readonly total: number }>`SELECT
      count(*) FILTER (WHERE platform_id = ${platformId})::int AS platform, count(*)::int AS total
      FROM mcp_sessions`.pipe(Effect.map(([row]) => row ?? { platform: 0, total: 0 }))

  /**
   * Room for one more session of this caller, and its row; or which cap refused. The key's own cap
   * displaces its least recently used session (a client that never DELETEs only hurts itself); the
   * platform and fleet caps refuse, after deleting what is already stale.
   */
  const admit = (principal: EndUserPrincipal, facts: SessionFacts, limits: AdmissionLimits, at: number) =>
    Effect.gen(function*() {
      yield* sql`SELECT pg_advisory_xact_lock(${sql.literal(String(ADMISSION_LOCK))})`
      yield* sql`DELETE FROM mcp_sessions WHERE id IN (
        SELECT id FROM mcp_sessions WHERE key_id = ${principal.keyId}
        ORDER BY last_seen_at DESC OFFSET ${MAX_SESSIONS_PER_KEY - 1})`
      let open = yield* counts(principal.platformId)
      if (open.platform >= limits.maxPerPlatform) {
        yield* sql`DELETE FROM mcp_sessions WHERE platform_id = ${principal.platformId} AND ${staleAt(at)}`
        open = yield* counts(principal.platformId)
        if (open.platform >= limits.maxPerPlatform) {
          return { _tag: "Refused", full: "platform", firstDeadline: yield* firstDeadline(principal.platformId) } as const
        }
      }
      if (open.total >= limits.maxSessions) {
        yield* sql`DELETE FROM mcp_sessions WHERE ${staleAt(at)}`
        open = yield* counts(principal.platformId)
        if (open.total >= limits.maxSessions) {
          return { _tag: "Refused", full: "fleet", firstDeadline: yield* firstDeadline(undefined) } as const
        }
      }
      yield* sql`INSERT INTO mcp_sessions ${
        sql.insert({
          id: facts.id,
          platform_id: principal.platformId,
          end_user_id: principal.endUserId,
          key_id: principal.keyId,
          app_slug: facts.appSlug,
          protocol_version: facts.protocolVersion,
          client_info: JSON.stringify(facts.clientInfo ?? {}),
          client_capabilities: JSON.stringify(facts.clientCapabilities ?? {}),
          created_at: new Date(at),
          expires_at: new Date(at + limits.ttlMillis),
          idle_millis: limits.idleMillis,
          last_seen_at: new Date(at)
        })
      }`
      return { _tag: "Opened" } as const
    }).pipe(sql.withTransaction, Effect.orDie)

  /**
   * A request of the session: true when the session exists, is bound to this key and app and is
   * neither expired nor idle; its last use moves to `at`. A stale one is deleted.
   */
  const touch = (id: string, keyId: string, appSlug: string, at: number) =>
    Effect.gen(function*() {
      const live = yield* sql`UPDATE mcp_sessions SET last_seen_at = greatest(last_seen_at, ${new Date(at)})
        WHERE id = ${id} AND key_id = ${keyId} AND app_slug = ${appSlug} AND NOT ${staleAt(at)}
        RETURNING id`
      if (live.length > 0) return true
      yield* sql`DELETE FROM mcp_sessions WHERE id = ${id} AND key_id = ${keyId} AND app_slug = ${appSlug} AND ${staleAt(at)}`
      return false
    }).pipe(Effect.orDie)

  /** The client's DELETE: true when it ended a live session of this key and app. */
  const end = (id: string, keyId: string, appSlug: string, at: number) =>
    sql<{ readonly live: boolean }>`DELETE FROM mcp_sessions WHERE id = ${id} AND key_id = ${keyId} AND app_slug = ${appSlug}
      RETURNING NOT ${staleAt(at)} AS live`.pipe(
      Effect.map((rows) => rows[0]?.live === true),
      Effect.orDie
    )

  /** Removes a row whose initialize did not become a session. */
  const discard = (id: string) => sql`DELETE FROM mcp_sessions WHERE id = ${id}`.pipe(Effect.asVoid, Effect.orDie)

  /** A tool call or listing starts: the session is not idle while it runs. */
  const callStarted = (id: string) => sql`UPDATE mcp_sessions SET running = running + 1 WHERE id = ${id}`.pipe(Effect.asVoid, Effect.orDie)

  /** A call ended: that counts as activity, the idle time starts again from `at`. */
  const callEnded = (id: string, at: number) =>
    sql`UPDATE mcp_sessions SET running = greatest(running - 1, 0), last_seen_at = greatest(last_seen_at, ${new Date(at)})
      WHERE id = ${id}`.pipe(Effect.asVoid, Effect.orDie)

  /** Deletes every session past its lifetime or idle time (clients that never sent DELETE). */
  const reap = (at: number) => sql`DELETE FROM mcp_sessions WHERE ${staleAt(at)}`.pipe(Effect.asVoid)

  /** Open sessions (stale ones not yet reaped included), of the fleet or of one platform. */
  const count = (platformId?: string) =>
    sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM mcp_sessions
      ${platformId === undefined ? sql`` : sql`WHERE platform_id = ${platformId}`}`.pipe(
      Effect.map(([row]) => row?.n ?? 0),
      Effect.orDie
    )

  return { admit, touch, end, discard, callStarted, callEnded, reap, count } as const
})
