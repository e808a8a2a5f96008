// KeyAuth: turns a bearer token into a principal (operator, platform key, end-user key).
// Keys are stored as SHA-256; lookups are cached in memory and the cache is invalidated
// locally at once and on every other instance through Postgres LISTEN/NOTIFY.
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Clock, Context, Deferred, Effect, Layer, Option, Redacted, Schedule, Stream } from "effect"
import { randomUUID, timingSafeEqual } from "node:crypto"
import { Forbidden, Unauthorized } from "../../schemas/Errors.js"
import { AdminKey } from "./AdminKey.js"
import { hashKey } from "./KeyFormat.js"
import { authLookups, taggedBy } from "../platform/Metrics.js"

const lookupsBy = taggedBy(authLookups, "source")
const fromCache = lookupsBy("cache")
const fromDatabase = lookupsBy("database")

export interface AdminPrincipal {
  readonly _tag: "Admin"
}
export interface PlatformPrincipal {
  readonly _tag: "PlatformKey"
  readonly keyId: string
  readonly platformId: string
  readonly scopes: ReadonlyArray<string>
}
export interface EndUserPrincipal {
  readonly _tag: "EndUserKey"
  readonly keyId: string
  readonly platformId: string
  readonly endUserId: string
  readonly scopes: ReadonlyArray<string>
}
export type Principal = AdminPrincipal | PlatformPrincipal | EndUserPrincipal

/** The authenticated caller of the current request. */
export class CurrentPrincipal extends Context.Tag("gateway/CurrentPrincipal")<CurrentPrincipal, Principal>() {}

// --- the service -------------------------------------------------------------------

const CHANNEL = "gateway_auth_invalidate"
/** A safety net only: invalidation normally arrives at once by NOTIFY. */
const CACHE_TTL_MS = 60_000
/** How often the LISTEN channel is proven live, and how long a probe may take to come back. */
const PROBE_EVERY = "3 seconds"
const PROBE_WAIT = "1 second"

interface CachedKey {
  readonly principal: PlatformPrincipal | EndUserPrincipal
  readonly expiresAt: number | null
  readonly cachedAt: number
}

interface KeyRow {
  readonly id: string
  readonly platform_id: string
  readonly end_user_id: string | null
  readonly scopes: ReadonlyArray<string>
  readonly is_active: boolean
  readonly deleted_at: Date | null
  readonly expires_at: Date | null
  readonly end_user_active: boolean | null
}

export type Invalidation =
  | { readonly keyId: string }
  | { readonly endUserId: string }
  | { readonly platformId: string }

const matches = (entry: CachedKey, target: Invalidation): boolean => {
  const p = entry.principal
  if ("keyId" in target) return p.keyId === target.keyId
  if ("platformId" in target) return p.platformId === target.platformId
  return p._tag === "EndUserKey" && p.endUserId === target.endUserId
}

const missing = new Unauthorized({ code: "missing_api_key", message: "Missing API key: send Authorization: Bearer <key>" })
const invalid = new Unauthorized({ code: "invalid_api_key", message: "Invalid API key (unknown, revoked or deleted)" })

export class KeyAuth extends Effect.Service<KeyAuth>()("gateway/KeyAuth", {
  dependencies: [AdminKey.layer],
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const pg = yield* PgClient.PgClient
    const admin = yield* AdminKey
    const adminHash = hashKey(Redacted.value(admin.key))
    const cache = new Map<string, CachedKey>()
    const lastUsed = new Map<string, Date>()

    const dropLocal = (target: Invalidation) => {
      for (const [hash, entry] of cache) if (matches(entry, target)) cache.delete(hash)
    }

    // Other instances (and this one) tell us about revocations by NOTIFY. The cache is trusted
    // only while LISTEN is proven live: our own probe notifications must come back. The
    // service is ready once the first probe returns; afterwards a probe every few seconds
    // checks the channel. When one goes missing (the listening connection died: the driver
    // does not tell us), the cache is dropped and bypassed, so revocations still take effect at
    // once, at the cost of a lookup per request, until probes come back.
    const listening = yield* Deferred.make<void>()
    const probes = { sent: `ready:${randomUUID()}`, received: "", healthy: false }
    const onMessage = (payload: string) =>
      Effect.sync(() => {
        if (payload.startsWith("ready:")) {
          if (payload === probes.sent) probes.received = payload
          return
        }
        try {
          dropLocal(JSON.parse(payload) as Invalidation)
        } catch {
          cache.clear()
        }
      })
    yield* pg.listen(CHANNEL).pipe(
      Stream.tap((payload) => payload === probes.sent ? Deferred.succeed(listening, undefined) : Effect.void),
      Stream.runForEach(onMessage),
      Effect.ensuring(Effect.sync(() => cache.clear())),
      Effect.retry(Schedule.spaced("1 second")),
      Effect.forkScoped
    )
    // A function: the statement must carry the probe of the moment, not the first one.
    const sendProbe = () => sql`SELECT pg_notify(${CHANNEL}, ${probes.sent})`
    yield* Effect.suspend(sendProbe).pipe(
      Effect.zipRight(Deferred.await(listening).pipe(Effect.timeout("200 millis"))),
      Effect.retry(Schedule.spaced("50 millis").pipe(Schedule.upTo("30 seconds"))),
      Effect.orDie,
      // Start-up waits in real time, even under a TestClock.
      Effect.withClock(Clock.make())
    )
    cache.clear()
    probes.healthy = true

    const checkChannel = Effect.gen(function*() {
      probes.sent = `ready:${randomUUID()}`
      yield* sendProbe().pipe(Effect.ignore)
      yield* Effect.sleep(PROBE_WAIT)
      const healthy = probes.received === probes.sent
      if (!healthy) cache.clear()
      probes.healthy = healthy
    })
    yield* checkChannel.pipe(
      Effect.repeat(Schedule.spaced(PROBE_EVERY)),
      Effect.withClock(Clock.make()),
      Effect.forkScoped
    )

    // last_used_at is written off the request path, in batches.
    const flushLastUsed = Effect.suspend(() => {
      if (lastUsed.size === 0) return Effect.void
      const ids = [...lastUsed.keys()]
      const times = ids.map((id) => lastUsed.get(id)!.toISOString())
      lastUsed.clear()
      return sql`UPDATE api_keys SET last_used_at = v.ts
        FROM (SELECT unnest(${ids}::uuid[]) AS id, unnest(${times}::timestamptz[]) AS ts) v
        WHERE api_keys.id = v.id AND (api_keys.last_used_at IS NULL OR api_keys.last_used_at < v.ts)`
    }).pipe(Effect.catchAllCause((cause) => Effect.logWarning("last_used_at flush failed", cause)))
    yield* flushLastUsed.pipe(Effect.repeat(Schedule.spaced("1 second")), Effect.forkScoped)
    yield* Effect.addFinalizer(() => flushLastUsed)

    const lookup = (hash: Buffer) =>
      sql<KeyRow>`SELECT k.id, k.platform_id, k.end_user_id, k.scopes, k.is_active, k.deleted_at,
          k.expires_at, eu.is_active AS end_user_active
        FROM api_keys k LEFT JOIN end_users eu ON eu.id = k.end_user_id
        WHERE k.key_hash = ${hash}`.pipe(Effect.map((rows) => Option.fromNullable(rows[0])))

    const toEntry = (row: KeyRow, now: number): Effect.Effect<CachedKey, Unauthorized | Forbidden> => {
      if (!row.is_active || row.deleted_at !== null) return Effect.fail(invalid)
      if (row.end_user_id !== null && row.end_user_active !== true) {
        return Effect.fail(new Forbidden({ code: "forbidden", message: "The end user of this key is deactivated" }))
      }
      const principal: PlatformPrincipal | EndUserPrincipal = row.end_user_id === null
        ? { _tag: "PlatformKey", keyId: row.id, platformId: row.platform_id, scopes: row.scopes }
        : { _tag: "EndUserKey", keyId: row.id, platformId: row.platform_id, endUserId: row.end_user_id, scopes: row.scopes }
      return Effect.succeed({ principal, expiresAt: row.expires_at?.getTime() ?? null, cachedAt: now })
    }

    /** Resolves `Authorization: Bearer <key>`; the key never leaves this function. */
    const authenticate = Effect.fnUntraced(function*(header: string | undefined) {
      if (header === undefined || /^\s*(Bearer)?\s*$/i.test(header)) return yield* missing
      const match = /^Bearer\s+(\S+)\s*$/i.exec(header)
      if (match === null) {
        return yield* new Unauthorized({
          code: "invalid_api_key",
          message: "Malformed Authorization header: expected Bearer <key>"
        })
      }
      const token = match[1]!
      const hash = hashKey(token)
      if (token.startsWith("sk-admin_")) {
        if (timingSafeEqual(hash, adminHash)) return { _tag: "Admin" } as Principal
        return yield* invalid
      }
      const now = yield* Clock.currentTimeMillis
      const cacheKey = hash.toString("base64")
      let entry = probes.healthy ? cache.get(cacheKey) : undefined
      if (entry === undefined || now - entry.cachedAt > CACHE_TTL_MS) {
        const row = yield* lookup(hash).pipe(Effect.orDie)
        if (Option.isNone(row)) return yield* invalid
        entry = yield* toEntry(row.value, now)
        if (probes.healthy) cache.set(cacheKey, entry)
        fromDatabase.unsafeUpdate(1, [])
      } else {
        fromCache.unsafeUpdate(1, [])
      }
      if (entry.expiresAt !== null && entry.expiresAt <= now) {
        return yield* new Unauthorized({ code: "api_key_expired", message: "This API key has expired" })
      }
      lastUsed.set(entry.principal.keyId, new Date(now))
      return entry.principal as Principal
    })

    /** Forget cached keys now, here and (after commit) on every other instance. */
    const invalidate = (target: Invalidation) =>
      Effect.sync(() => dropLocal(target)).pipe(
        Effect.zipRight(sql`SELECT pg_notify(${CHANNEL}, ${JSON.stringify(target)})`),
        Effect.orDie,
        Effect.asVoid
      )

    return { authenticate, invalidate, flushLastUsed } as const
  })
}) {
  /**
   * Tests: `Bearer <token>` authenticates as `principals[token]`; no header is missing_api_key,
   * any other invalid_api_key. Nothing is cached, read or written; invalidation does nothing.
   */
  static readonly test = (principals: Readonly<Record<string, Principal>> = {}): Layer.Layer<KeyAuth> =>
    Layer.succeed(
      KeyAuth,
      KeyAuth.make({
        authenticate: (header) => {
          if (header === undefined || /^\s*(Bearer)?\s*$/i.test(header)) return Effect.fail(missing)
          const token = /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1]
          return token !== undefined && Object.hasOwn(principals, token) ? Effect.succeed(principals[token]!) : Effect.fail(invalid)
        },
        invalidate: () => Effect.void,
        flushLastUsed: Effect.void
      })
    )
}
