// RateLimiter: per-end-user rpm / tpm (60 s sliding windows) and rpd (UTC day) admission, in memory
// for one instance or in Redis (one Lua script per call) so every instance shares one limit.
// Decisions (windows, settlement, headers, time source) are written down next to the code below.
import { Config, Context, Data, Effect, Layer, Metric, Option, Redacted } from "effect"
import type { ConfigError } from "effect/ConfigError"
import { createHash, randomBytes } from "node:crypto"
import { rateLimiterErrors } from "../platform/Metrics.js"

/** null = unlimited. */
export interface RateLimits {
  readonly rpm: number | null
  readonly tpm: number | null
  readonly rpd: number | null
}

/** What the x-ratelimit-* headers need. */
export interface RateLimitState {
  readonly limitRequests: number | null
  readonly remainingRequests: number | null
  readonly resetRequestsMs: number | null
  readonly limitTokens: number | null
  readonly remainingTokens: number | null
  readonly resetTokensMs: number | null
}

export class RateLimitExceeded extends Data.TaggedError("RateLimitExceeded")<{
  readonly limit: "rpm" | "tpm" | "rpd"
  readonly retryAfterMs: number
  readonly state: RateLimitState
}> {}

export interface RedisLimiterOptions {
  /** Prepended to every key; tests use a unique one per run. Default `gw:rl:`. */
  readonly keyPrefix?: string | undefined
  /**
   * When Redis fails during an admission: `closed` (default) refuses the request with 503
   * (no unlimited traffic while the limiter is blind), `open` admits it unlimited. Either way a
   * warning is logged and `gateway.ratelimiter.errors` counts it.
   */
  readonly onRedisError?: "closed" | "open" | undefined
}

/** The Redis limiter could not decide (fail-closed mode): the request is answered 503. */
export class RateLimiterUnavailable extends Data.TaggedError("RateLimiterUnavailable")<{ readonly operation: string }> {}

// --- shared semantics ----------------------------------------------------------------
//
// Windows. rpm and tpm share one log of admissions per subject: an entry (timestamp, tokens)
// counts while now < timestamp + 60 s, so it is an exact sliding window (a log, not an
// approximating two-bucket counter): exactness under parallel load matters more than memory,
// and the log is bounded by the limits themselves. rpd is a counter for the current UTC date.
// A window only records while its limit is set (rpm or tpm for the log, rpd for the counter):
// requests made while a limit was null do not count once it is set.
//
// Admission is all-or-nothing: the request is refused when count + 1 > rpm, or
// tokens + estimate > tpm, or today + 1 > rpd; a refused request records nothing.
// An estimate larger than tpm can never pass, even on an empty window; it is refused with
// retryAfterMs = 60 s (one full window), as is any request when rpm = 0.
// When several limits refuse, the error names the one whose retryAfterMs is longest (the
// request cannot pass before that), and carries that retryAfterMs.
//
// Settlement replaces the estimate with the actual usage at the admission's own timestamp
// (the entry is rewritten in place, so its tokens leave the window when the admission does).
// The contract carries no admission id, so settle corrects the oldest unsettled in-window
// admission of the subject with the same estimate: such admissions differ only in timestamp,
// so at worst the correction lands on a sibling admitted a little earlier. A settlement that
// arrives after its admission left the window is dropped (that minute is over).
//
// State (headers). Requests: the tighter of rpm and rpd, i.e. the one with fewer remaining
// (rpm on a tie); reset = ms until the oldest log entry leaves the window (one slot frees)
// for rpm, ms until the next UTC midnight for rpd. Tokens: tpm; remaining = tpm - tokens in
// the window (never below 0); reset = ms until the oldest log entry leaves the window (some
// tokens free), 0 on an empty window. On success the state includes the admitted request; on
// refusal it is the state without it.

const WINDOW_MS = 60_000
const DAY_MS = 86_400_000

const nullState: RateLimitState = {
  limitRequests: null,
  remainingRequests: null,
  resetRequestsMs: null,
  limitTokens: null,
  remainingTokens: null,
  resetTokensMs: null
}

/** A subject's usage at one instant, as both stores report it. */
interface Snapshot {
  readonly count: number // log entries in the window
  readonly tokens: number // tokens in the window
  readonly oldestResetMs: number // ms until the oldest log entry leaves the window; 0 if none
  readonly today: number // requests counted for the current UTC date
  readonly untilMidnightMs: number
}

const untilMidnight = (now: number) => DAY_MS - (((now % DAY_MS) + DAY_MS) % DAY_MS)

const normalize = (limits: RateLimits): RateLimits => {
  const n = (x: number | null) => (x === null || !Number.isFinite(x) ? null : Math.max(0, Math.floor(x)))
  return { rpm: n(limits.rpm), tpm: n(limits.tpm), rpd: n(limits.rpd) }
}
const tokensOf = (n: number) => (Number.isFinite(n) ? Math.max(0, Math.ceil(n)) : 0)
const unlimited = (l: RateLimits) => l.rpm === null && l.tpm === null && l.rpd === null

const stateOf = (l: RateLimits, s: Snapshot): RateLimitState => {
  const rpm = l.rpm === null ? null : { limit: l.rpm, remaining: Math.max(0, l.rpm - s.count), reset: s.oldestResetMs }
  const rpd = l.rpd === null ? null : { limit: l.rpd, remaining: Math.max(0, l.rpd - s.today), reset: s.untilMidnightMs }
  const req = rpm === null ? rpd : rpd === null ? rpm : rpd.remaining < rpm.remaining ? rpd : rpm
  return {
    limitRequests: req?.limit ?? null,
    remainingRequests: req?.remaining ?? null,
    resetRequestsMs: req?.reset ?? null,
    limitTokens: l.tpm,
    remainingTokens: l.tpm === null ? null : Math.max(0, l.tpm - s.tokens),
    resetTokensMs: l.tpm === null ? null : s.oldestResetMs
  }
}

type LimitName = RateLimitExceeded["limit"]

/** Picks the binding refusal: the longest wait. */
const worst = (refusals: ReadonlyArray<readonly [LimitName, number]>): readonly [LimitName, number] | undefined =>
  refusals.reduce<readonly [LimitName, number] | undefined>((acc, r) => (acc === undefined || r[1] > acc[1] ? r : acc), undefined)

// --- memory ----------------------------------------------------------------------------

interface Entry {
  readonly ts: number
  readonly estimate: number
  tokens: number
  settled: boolean
}
interface Subject {
  readonly log: Array<Entry> // sorted by ts
  tokens: number
  day: number
  today: number
}

const makeMemory = Effect.sync(() => {
  // Every read and write of `subjects` happens inside one Effect.sync body with the time read in
  // it: JS runs it to completion, so each admit/settle is atomic against all other fibers.
  const subjects = new Map<string, Subject>()
  let lastSweep = 0

  const trim = (s: Subject, now: number) => {
    let k = 0
    while (k < s.log.length && s.log[k]!.ts + WINDOW_MS <= now) {
      s.tokens -= s.log[k]!.tokens
      k++
    }
    if (k > 0) s.log.splice(0, k)
    if (s.log.length === 0) s.tokens = 0
  }
  // Idle subjects vanish: once a minute drop every subject with an empty window and no count today.
  const sweep = (now: number) => {
    if (now - lastSweep < WINDOW_MS && now >= lastSweep) return
    lastSweep = now
    const day = Math.floor(now / DAY_MS)
    for (const [key, s] of subjects) {
      trim(s, now)
      if (s.log.length === 0 && (s.day !== day || s.today === 0)) subjects.delete(key)
    }
  }
  const snapshot = (s: Subject, now: number): Snapshot => {
    const day = Math.floor(now / DAY_MS)
    return {
      count: s.log.length,
      tokens: s.tokens,
      oldestResetMs: s.log.length === 0 ? 0 : s.log[0]!.ts + WINDOW_MS - now,
      today: s.day === day ? s.today : 0,
      untilMidnightMs: untilMidnight(now)
    }
  }

  const admitNow = (subject: string, l: RateLimits, estimate: number, now: number): RateLimitState | RateLimitExceeded => {
    sweep(now)
    const s = subjects.get(subject) ?? { log: [], tokens: 0, day: 0, today: 0 }
    trim(s, now)
    const snap = snapshot(s, now)
    const refusals: Array<readonly [LimitName, number]> = []
    if (l.rpm !== null && snap.count + 1 > l.rpm) {
      // the (count - rpm)th oldest entry must leave before one more fits
      const e = s.log[snap.count - l.rpm]
      refusals.push(["rpm", e === undefined ? WINDOW_MS : e.ts + WINDOW_MS - now])
    }
    if (l.tpm !== null && snap.tokens + estimate > l.tpm) {
      let wait = WINDOW_MS
      if (estimate <= l.tpm) {
        let left = snap.tokens
        for (const e of s.log) {
          left -= e.tokens
          if (left + estimate <= l.tpm) {
            wait = e.ts + WINDOW_MS - now
            break
          }
        }
      }
      refusals.push(["tpm", wait])
    }
    if (l.rpd !== null && snap.today + 1 > l.rpd) refusals.push(["rpd", snap.untilMidnightMs])
    const refused = worst(refusals)
    if (refused !== undefined) {
      if (s.log.length === 0 && snap.today === 0) subjects.delete(subject)
      return new RateLimitExceeded({ limit: refused[0], retryAfterMs: refused[1], state: stateOf(l, snap) })
    }
    if (l.rpm !== null || l.tpm !== null) {
      const entry: Entry = { ts: now, estimate, tokens: estimate, settled: l.tpm === null }
      // keep the log sorted even if the clock stepped back
      let i = s.log.length
      while (i > 0 && s.log[i - 1]!.ts > now) i--
      s.log.splice(i, 0, entry)
      s.tokens += estimate
    }
    if (l.rpd !== null) {
      s.day = Math.floor(now / DAY_MS)
      s.today = snap.today + 1
    }
    subjects.set(subject, s)
    return stateOf(l, snapshot(s, now))
  }

  const settleNow = (subject: string, estimate: number, actual: number, now: number) => {
    const s = subjects.get(subject)
    if (s === undefined) return
    trim(s, now)
    const e = s.log.find((x) => !x.settled && x.estimate === estimate)
    if (e === undefined) return
    e.settled = true
    s.tokens += actual - e.tokens
    e.tokens = actual
  }

  return RateLimiter.of({
    admit: (subject, limits, estimatedTokens) => {
      const l = normalize(limits)
      if (unlimited(l)) return Effect.succeed(nullState)
      const estimate = tokensOf(estimatedTokens)
      return Effect.clockWith((clock) =>
        Effect.suspend(() => {
          const r = admitNow(subject, l, estimate, clock.unsafeCurrentTimeMillis())
          return r instanceof RateLimitExceeded ? Effect.fail(r) : Effect.succeed(r)
        })
      )
    },
    settle: (subject, limits, estimatedTokens, actualTokens) => {
      const l = normalize(limits)
      const estimate = tokensOf(estimatedTokens)
      const actual = tokensOf(actualTokens)
      if (l.tpm === null || estimate === actual) return Effect.void
      return Effect.clockWith((clock) =>
        Effect.sync(() => settleNow(subject, estimate, actual, clock.unsafeCurrentTimeMillis()))
      )
    }
  })
})

// --- redis -----------------------------------------------------------------------------
//
// Time comes from the Redis server (`TIME` inside the scripts), not from the instance's Clock:
// every instance then agrees on the windows whatever the skew between their clocks. (TestClock
// therefore does not drive this layer; its tests use real time.)
// Keys per subject, all with the subject as hash tag so one script touches one slot:
//   {s}:log   zset, member `<unique>|<tokens>`, score = admission ms (the rpm/tpm log)
//   {s}:tok   integer, sum of the tokens in the log (kept with the log so admit is O(expired))
//   {s}:day   hash { d: UTC day number, n: requests that day }, expires at the next midnight
//   {s}:pend:<estimate>  list of log members not settled yet, oldest first (settle's FIFO)
// The log and its sum expire 61 s after the last write, so idle subjects vanish.

const ADMIT_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local W, DAY = 60000, 86400000
local rpm, tpm, rpd, est = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local windowed = rpm >= 0 or tpm >= 0
local count, tokens, oldestReset = 0, 0, 0
local function tokensOf(m) return tonumber(string.match(m, '|(%d+)$')) end
if windowed then
  local cutoff = now - W
  local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff)
  if #expired > 0 then
    local freed = 0
    for i = 1, #expired do freed = freed + tokensOf(expired[i]) end
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cutoff)
    redis.call('DECRBY', KEYS[2], freed)
  end
  count = redis.call('ZCARD', KEYS[1])
  if count == 0 then
    redis.call('DEL', KEYS[2])
  else
    tokens = tonumber(redis.call('GET', KEYS[2]) or '0')
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    oldestReset = tonumber(first[2]) + W - now
  end
  if tpm >= 0 then
    -- drop pending members whose admission already left the window (they sit at the head)
    while true do
      local head = redis.call('LINDEX', KEYS[4], 0)
      if not head or redis.call('ZSCORE', KEYS[1], head) then break end
      redis.call('LPOP', KEYS[4])
    end
  end
end
local day = math.floor(now / DAY)
local untilMidnight = (day + 1) * DAY - now
local today = 0
if rpd >= 0 then
  local d = redis.call('HMGET', KEYS[3], 'd', 'n')
  if tonumber(d[1]) == day then today = tonumber(d[2]) or 0 end
end
local limit, retry = 0, -1
if rpm >= 0 and count + 1 > rpm then
  local wait = W
  local e = redis.call('ZRANGE', KEYS[1], count - rpm, count - rpm, 'WITHSCORES')
  if count > 0 and #e == 2 then wait = tonumber(e[2]) + W - now end
  if wait > retry then limit, retry = 1, wait end
end
if tpm >= 0 and tokens + est > tpm then
  local wait = W
  if est <= tpm then
    local all = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
    local left = tokens
    for i = 1, #all, 2 do
      left = left - tokensOf(all[i])
      if left + est <= tpm then wait = tonumber(all[i + 1]) + W - now break end
    end
  end
  if wait > retry then limit, retry = 2, wait end
end
if rpd >= 0 and today + 1 > rpd then
  if untilMidnight > retry then limit, retry = 3, untilMidnight end
end
if limit > 0 then
  return { limit, retry, count, tokens, oldestReset, today, untilMidnight }
end
if windowed then
  local member = ARGV[5] .. '|' .. est
  redis.call('ZADD', KEYS[1], now, member)
  redis.call('INCRBY', KEYS[2], est)
  redis.call('PEXPIRE', KEYS[1], W + 1000)
  redis.call('PEXPIRE', KEYS[2], W + 1000)
  if count == 0 then oldestReset = W end
  count, tokens = count + 1, tokens + est
  if tpm >= 0 then
    redis.call('RPUSH', KEYS[4], member)
    redis.call('PEXPIRE', KEYS[4], W + 1000)
  end
end
if rpd >= 0 then
  today = today + 1
  redis.call('HSET', KEYS[3], 'd', day, 'n', today)
  redis.call('PEXPIRE', KEYS[3], untilMidnight)
end
return { 0, 0, count, tokens, oldestReset, today, untilMidnight }
`

const SETTLE_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local est, actual = tonumber(ARGV[1]), tonumber(ARGV[2])
local cutoff = now - 60000
while true do
  local m = redis.call('LPOP', KEYS[3])
  if not m then return 0 end
  local score = redis.call('ZSCORE', KEYS[1], m)
  if score and tonumber(score) > cutoff then
    -- ZREM of the last member deletes the key (and its TTL): keep the TTL to restore it
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl <= 0 then ttl = 61000 end
    redis.call('ZREM', KEYS[1], m)
    redis.call('ZADD', KEYS[1], score, string.match(m, '^(.*)|') .. '|' .. actual)
    redis.call('INCRBY', KEYS[2], actual - est)
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('PEXPIRE', KEYS[2], ttl)
    return 1
  end
end
`

interface Script {
  readonly lua: string
  readonly sha: string
}
const script = (lua: string): Script => ({ lua, sha: createHash("sha1").update(lua).digest("hex") })
const ADMIT = script(ADMIT_LUA)
const SETTLE = script(SETTLE_LUA)

const isNoScript = (e: unknown) => e instanceof Error && e.message.startsWith("NOSCRIPT")

const toNumbers = (reply: unknown): ReadonlyArray<number> => {
  if (!Array.isArray(reply)) throw new Error(`RateLimiter: unexpected Redis reply ${String(reply)}`)
  return reply.map((x: unknown) => Number(x))
}

const LIMIT_BY_CODE: Record<number, LimitName> = { 1: "rpm", 2: "tpm", 3: "rpd" }

const makeRedis = (url: string, options: RedisLimiterOptions) =>
  Effect.gen(function*() {
    const prefix = options.keyPrefix ?? "gw:rl:"
    const redis = yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: async () => {
          // Bounded retries and a command timeout: a limiter call must not hang on a dead Redis.
          // Failures are handled per onRedisError (closed: 503, open: unlimited).
          // Loaded only when REDIS_URL is set (the client is tens of MB of resident memory).
          const { Redis } = await import("ioredis")
          const client = new Redis(url, {
            lazyConnect: true,
            maxRetriesPerRequest: 2,
            commandTimeout: 5_000,
            enableAutoPipelining: true // concurrent admits share round trips; each script stays atomic
          })
          // Connection errors reach us through the failing commands (counted and logged there).
          client.on("error", () => {})
          try {
            await client.connect()
            await client.script("LOAD", ADMIT.lua)
            await client.script("LOAD", SETTLE.lua)
          } catch (e) {
            client.disconnect()
            throw e
          }
          return client
        },
        catch: (e) => new Error(`RateLimiter: cannot connect to Redis: ${String(e)}`)
      }).pipe(Effect.orDie),
      (client) => Effect.promise(() => client.quit().catch(() => client.disconnect()))
    )

    // EVALSHA first (the scripts were loaded at connect); EVAL when the server forgot them.
    const run = (s: Script, keys: ReadonlyArray<string>, args: ReadonlyArray<string | number>) =>
      Effect.tryPromise({
        try: () =>
          redis
            .evalsha(s.sha, keys.length, ...keys, ...args)
            .catch((e: unknown) => (isNoScript(e) ? redis.eval(s.lua, keys.length, ...keys, ...args) : Promise.reject(e))),
        catch: (e) => e
      }).pipe(Effect.orDie)

    const keys = (subject: string) => {
      const base = `${prefix}{${subject}}:`
      return { log: `${base}log`, tok: `${base}tok`, day: `${base}day`, pend: (est: number) => `${base}pend:${est}` }
    }
    const arg = (x: number | null) => (x === null ? -1 : x)
    const mode = options.onRedisError ?? "closed"
    /** A Redis failure: counted and logged; then fail closed (503) or open (unlimited). */
    const redisFailed = (operation: "admit" | "settle", defect: unknown) =>
      Metric.increment(Metric.tagged(Metric.tagged(rateLimiterErrors, "operation", operation), "mode", mode)).pipe(
        Effect.zipRight(Effect.logWarning(`rate limiter: Redis failed during ${operation} (${mode}): ${String(defect)}`))
      )
    let seq = 0
    const instance = randomBytes(6).toString("hex")

    return RateLimiter.of({
      admit: (subject, limits, estimatedTokens) => {
        const l = normalize(limits)
        if (unlimited(l)) return Effect.succeed(nullState)
        const estimate = tokensOf(estimatedTokens)
        const k = keys(subject)
        const unique = `${instance}.${(seq = (seq + 1) % Number.MAX_SAFE_INTEGER).toString(36)}`
        return run(ADMIT, [k.log, k.tok, k.day, k.pend(estimate)], [arg(l.rpm), arg(l.tpm), arg(l.rpd), estimate, unique]).pipe(
          Effect.flatMap((reply) => Effect.try({ try: () => toNumbers(reply), catch: (e) => e })),
          Effect.orDie,
          Effect.flatMap(([code = 0, retry = 0, count = 0, tokens = 0, oldestResetMs = 0, today = 0, untilMidnightMs = 0]) => {
            const state = stateOf(l, { count, tokens, oldestResetMs, today, untilMidnightMs })
            const limit = LIMIT_BY_CODE[code]
            return limit === undefined
              ? Effect.succeed(state)
              : Effect.fail(new RateLimitExceeded({ limit, retryAfterMs: retry, state }))
          }),
          Effect.catchAllDefect((defect) =>
            redisFailed("admit", defect).pipe(
              Effect.zipRight(mode === "open" ? Effect.succeed(nullState) : Effect.die(new RateLimiterUnavailable({ operation: "admit" })))
            )),
          Effect.withSpan("RateLimiter.admit", { attributes: { store: "redis" } })
        )
      },
      settle: (subject, limits, estimatedTokens, actualTokens) => {
        const l = normalize(limits)
        const estimate = tokensOf(estimatedTokens)
        const actual = tokensOf(actualTokens)
        if (l.tpm === null || estimate === actual) return Effect.void
        const k = keys(subject)
        return run(SETTLE, [k.log, k.tok, k.pend(estimate)], [estimate, actual]).pipe(
          Effect.asVoid,
          // After commit: a lost tpm correction is not worth failing anything for.
          Effect.catchAllDefect((defect) => redisFailed("settle", defect)),
          Effect.withSpan("RateLimiter.settle", { attributes: { store: "redis" } })
        )
      }
    })
  })

// --- the service -----------------------------------------------------------------------

export class RateLimiter extends Context.Tag("gateway/RateLimiter")<RateLimiter, {
  /** Admits one request of `estimatedTokens` for `subject` (an end user id) or fails; all-or-nothing: a refused request consumes nothing. */
  readonly admit: (subject: string, limits: RateLimits, estimatedTokens: number) => Effect.Effect<RateLimitState, RateLimitExceeded>
  /** After the call: replace the admission's token estimate with the actual usage in the tpm window (delta may be negative). */
  readonly settle: (subject: string, limits: RateLimits, estimatedTokens: number, actualTokens: number) => Effect.Effect<void>
}>() {
  /** One instance's limits, time from Effect's Clock (TestClock drives it). */
  static readonly layerMemory: Layer.Layer<RateLimiter> = Layer.effect(RateLimiter, makeMemory)

  /** Limits shared by every instance on `url`; scoped: connects on build, quits on release. */
  static readonly layerRedis = (url: string, options: RedisLimiterOptions = {}): Layer.Layer<RateLimiter> =>
    Layer.scoped(RateLimiter, makeRedis(url, options))

  /**
   * Tests: `admit` decides each admission (by default every call is admitted, with no limits'
   * state); settlement does nothing.
   */
  static readonly test = (
    admit: Context.Tag.Service<RateLimiter>["admit"] = () => Effect.succeed(nullState)
  ): Layer.Layer<RateLimiter> => Layer.succeed(RateLimiter, { admit, settle: () => Effect.void })

  /** REDIS_URL set -> Redis, else memory. */
  static readonly layerFromConfig: Layer.Layer<RateLimiter, ConfigError> = Layer.unwrapEffect(
    Effect.gen(function*() {
      const url = yield* Config.option(Config.redacted("REDIS_URL")).pipe(
        Effect.map(Option.filter((u) => Redacted.value(u).trim() !== ""))
      )
      const onRedisError = yield* Config.literal("closed", "open")("GATEWAY_RATE_LIMIT_ON_REDIS_ERROR").pipe(
        Config.withDefault("closed" as const)
      )
      return Option.match(url, {
        onNone: () => RateLimiter.layerMemory,
        onSome: (u) => RateLimiter.layerRedis(Redacted.value(u), { onRedisError })
      })
    })
  )
}
