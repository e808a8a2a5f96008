// The Redis store: limits shared by every instance, one Lua script per call.
// Semantics (windows, settlement, header state) are in Windows.ts.
import { Data, Effect, Metric } from "effect"
import { randomBytes } from "node:crypto"
import { type RedisScript, redisScript, runRedisScript } from "../../lib/RedisScripts.js"
import { rateLimiterErrors } from "../../platform/Metrics.js"
import {
  type LimitName,
  normalize,
  nullState,
  type RateLimiterService,
  RateLimitExceeded,
  stateOf,
  tokensOf,
  unlimited
} from "./Windows.js"

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

const ADMIT = redisScript(ADMIT_LUA)
const SETTLE = redisScript(SETTLE_LUA)

const toNumbers = (reply: unknown): ReadonlyArray<number> => {
  if (!Array.isArray(reply)) throw new Error(`RateLimiter: unexpected Redis reply ${String(reply)}`)
  return reply.map((x: unknown) => Number(x))
}

const LIMIT_BY_CODE: Record<number, LimitName> = { 1: "rpm", 2: "tpm", 3: "rpd" }

export const makeRedis = (url: string, options: RedisLimiterOptions) =>
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
            commandTimeout: 5_000
            // No auto-pipelining: it builds an ioredis pipeline per tick, and each pipeline gets a
            // hidden class of its own (hot-path rule "no hidden class per call"). Measured against
            // one command per script: about 60% more client CPU per admission alone, 30% more at
            // 16 concurrent, and megabytes kept through every scavenge.
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
    const run = (s: RedisScript, keys: ReadonlyArray<string>, args: ReadonlyArray<string | number>) =>
      Effect.tryPromise({ try: () => runRedisScript(redis, s, keys, args), catch: (e) => e }).pipe(Effect.orDie)

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

    const service: RateLimiterService = {
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
    }
    return service
  })
