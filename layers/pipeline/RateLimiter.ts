// RateLimiter: per-end-user rpm / tpm (60 s sliding windows) and rpd (UTC day) admission, in memory
// for one instance (ratelimit/Memory.ts) or in Redis (ratelimit/Redis.ts, one Lua script per call)
// so every instance shares one limit. Decisions (windows, settlement, headers) are written down in
// ratelimit/Windows.ts.
import { Config, Context, Effect, Layer, Option, Redacted } from "effect"
import type { ConfigError } from "effect/ConfigError"
import { makeMemory } from "./ratelimit/Memory.js"
import { makeRedis, type RedisLimiterOptions } from "./ratelimit/Redis.js"
import { nullState, type RateLimiterService } from "./ratelimit/Windows.js"

export { RateLimiterUnavailable, type RedisLimiterOptions } from "./ratelimit/Redis.js"
export { RateLimitExceeded, type RateLimiterService, type RateLimits, type RateLimitState } from "./ratelimit/Windows.js"

export class RateLimiter extends Context.Tag("gateway/RateLimiter")<RateLimiter, RateLimiterService>() {
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
