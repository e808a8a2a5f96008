// RateLimiter.layerRedis against a real Redis (REDIS_URL): exact limits under parallel load, one
// limit shared by two instances, settlement, the rpd counter, and key hygiene. Keys live under a
// unique prefix per run, removed afterwards. The memory layer is covered in test/unit/.
import { expect, layer } from "@effect/vitest"
import { Context, Effect, Either, Layer } from "effect"
import { Redis } from "ioredis"
import { afterAll, describe } from "vitest"
import { RateLimiter, RateLimitExceeded, type RateLimits } from "../layers/pipeline/RateLimiter.js"

const url = process.env.REDIS_URL ?? ""
const prefix = `gw:rl:test:${process.pid}:${Date.now().toString(36)}:`
let n = 0
const subject = (name: string) => `${name}-${++n}`
const limits = (l: Partial<RateLimits>): RateLimits => ({ rpm: null, tpm: null, rpd: null, ...l })

/** A plain client to inspect keys. */
const inspect = <A>(f: (r: Redis) => Promise<A>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => new Redis(url)),
    (r) => Effect.promise(() => f(r)),
    (r) => Effect.promise(() => r.quit())
  )

const admitMany = (rl: Context.Tag.Service<RateLimiter>, count: number, s: string, l: RateLimits, tokens: number) =>
  Effect.forEach(Array.from({ length: count }), () => Effect.either(rl.admit(s, l, tokens)), { concurrency: "unbounded" })

describe.skipIf(url === "")("Redis limiter (needs REDIS_URL)", () => {
  afterAll(async () => {
    const r = new Redis(url)
    let cursor = "0"
    do {
      const [next, keys] = await r.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 500)
      if (keys.length > 0) await r.del(...keys)
      cursor = next
    } while (cursor !== "0")
    await r.quit()
  })

  layer(RateLimiter.layerRedis(url, { keyPrefix: prefix }), { excludeTestServices: true })("layerRedis", (it) => {
    it.effect("rpm 3: the 4th is refused with retryAfter until the first leaves the window", () =>
      Effect.gen(function*() {
        const rl = yield* RateLimiter
        const s = subject("rpm")
        const l = limits({ rpm: 3 })
        const first = yield* rl.admit(s, l, 0)
        expect(first).toEqual({
          limitRequests: 3, remainingRequests: 2, resetRequestsMs: 60_000,
          limitTokens: null, remainingTokens: null, resetTokensMs: null
        })
        yield* rl.admit(s, l, 0)
        yield* rl.admit(s, l, 0)
        const e = yield* Effect.flip(rl.admit(s, l, 0))
        expect(e).toBeInstanceOf(RateLimitExceeded)
        expect(e.limit).toBe("rpm")
        expect(e.retryAfterMs).toBeGreaterThan(55_000)
        expect(e.retryAfterMs).toBeLessThanOrEqual(60_000)
        expect(e.state.remainingRequests).toBe(0)
      }))

    it.effect("200 concurrent admits with rpm 50 admit exactly 50", () =>
      Effect.gen(function*() {
        const rl = yield* RateLimiter
        const s = subject("par-rpm")
        const results = yield* admitMany(rl, 200, s, limits({ rpm: 50 }), 0)
        expect(results.filter(Either.isRight)).toHaveLength(50)
        expect(results.filter(Either.isLeft).every((r) => r.left.limit === "rpm")).toBe(true)
        expect(yield* inspect((r) => r.zcard(`${prefix}{${s}}:log`))).toBe(50)
      }))

    it.effect("tpm is exact under concurrency: 100 x 30 tokens against 1000 -> 33", () =>
      Effect.gen(function*() {
        const rl = yield* RateLimiter
        const s = subject("par-tpm")
        const results = yield* admitMany(rl, 100, s, limits({ tpm: 1000 }), 30)
        expect(results.filter(Either.isRight)).toHaveLength(33)
        expect(yield* inspect((r) => r.get(`${prefix}{${s}}:tok`))).toBe("990")
        const e = yield* Effect.flip(rl.admit(s, limits({ tpm: 1000 }), 11))
        expect(e.state.remainingTokens).toBe(10)
        expect((yield* rl.admit(s, limits({ tpm: 1000 }), 10)).remainingTokens).toBe(0)
      }))

    it.scoped("two instances (two connections) share one limit", () =>
      Effect.gen(function*() {
        const build = Layer.build(RateLimiter.layerRedis(url, { keyPrefix: prefix })).pipe(Effect.map(Context.get(RateLimiter)))
        const a = yield* build
        const b = yield* build
        const s = subject("shared")
        const l = limits({ rpm: 30, tpm: 3000 })
        // interleaved from both instances at once: exactly the limit in total
        const results = yield* Effect.forEach(Array.from({ length: 80 }, (_, i) => (i % 2 === 0 ? a : b)), (rl) =>
          Effect.either(rl.admit(s, l, 10)), { concurrency: "unbounded" })
        expect(results.filter(Either.isRight)).toHaveLength(30)
        expect((yield* Effect.flip(a.admit(s, l, 0))).state.remainingTokens).toBe(2700)
        expect((yield* Effect.flip(b.admit(s, l, 0))).state.remainingRequests).toBe(0)
        // alternating one by one: each sees the other's admissions
        const s2 = subject("shared-seq")
        const l2 = limits({ rpm: 4 })
        expect((yield* a.admit(s2, l2, 0)).remainingRequests).toBe(3)
        expect((yield* b.admit(s2, l2, 0)).remainingRequests).toBe(2)
        expect((yield* a.admit(s2, l2, 0)).remainingRequests).toBe(1)
        expect((yield* b.admit(s2, l2, 0)).remainingRequests).toBe(0)
        expect((yield* Effect.flip(a.admit(s2, l2, 0))).limit).toBe("rpm")
      }))

    it.effect("settle replaces the estimate: lowering usage lets the next request in", () =>
      Effect.gen(function*() {
        const rl = yield* RateLimiter
        const s = subject("settle")
        const l = limits({ tpm: 1000 })
        expect((yield* rl.admit(s, l, 600)).remainingTokens).toBe(400)
        const e = yield* Effect.flip(rl.admit(s, l, 500))
        expect(e.limit).toBe("tpm")
        expect(e.retryAfterMs).toBeGreaterThan(55_000)
        yield* rl.settle(s, l, 600, 100)
        // the rewritten (only) entry keeps its sum and expiry
        const [tok, ttls] = yield* inspect((r) =>
          Promise.all([r.get(`${prefix}{${s}}:tok`), Promise.all([r.pttl(`${prefix}{${s}}:log`), r.pttl(`${prefix}{${s}}:tok`)])])
        )
        expect(tok).toBe("100")
        for (const ttl of ttls) expect(ttl).toBeGreaterThan(50_000)
        expect((yield* rl.admit(s, l, 500)).remainingTokens).toBe(400)
        yield* rl.settle(s, l, 500, 900) // more than estimated: the window fills up
        expect(yield* inspect((r) => r.get(`${prefix}{${s}}:tok`))).toBe("1000")
        expect((yield* Effect.flip(rl.admit(s, l, 1))).state.remainingTokens).toBe(0)
        // every pending entry was consumed by its settlement
        expect(yield* inspect((r) => r.exists(`${prefix}{${s}}:pend:600`, `${prefix}{${s}}:pend:500`))).toBe(0)
      }))

    it.effect("an estimate above tpm is refused on an empty window and consumes nothing", () =>
      Effect.gen(function*() {
        const rl = yield* RateLimiter
        const s = subject("big")
        const e = yield* Effect.flip(rl.admit(s, limits({ tpm: 1000, rpm: 5 }), 1001))
        expect(e).toMatchObject({ limit: "tpm", retryAfterMs: 60_000 })
        expect(e.state).toMatchObject({ remainingTokens: 1000, remainingRequests: 5 })
        expect(yield* inspect((r) => r.exists(`${prefix}{${s}}:log`))).toBe(0)
      }))

    it.effect("a refused request consumes nothing", () =>
      Effect.gen(function*() {
        const rl = yield* RateLimiter
        const s = subject("atomic")
        const l = limits({ rpm: 2, tpm: 100, rpd: 10 })
        yield* rl.admit(s, l, 50)
        expect((yield* Effect.flip(rl.admit(s, l, 60))).limit).toBe("tpm")
        expect(yield* rl.admit(s, l, 40)).toMatchObject({ remainingRequests: 0, remainingTokens: 10 })
        const byRpm = yield* Effect.flip(rl.admit(s, l, 5))
        expect(byRpm.limit).toBe("rpm")
        expect(byRpm.state).toMatchObject({ remainingRequests: 0, remainingTokens: 10 })
        expect((yield* rl.admit(s, limits({ rpd: 10 }), 0)).remainingRequests).toBe(7)
      }))

    it.effect("rpd counts per UTC day and refuses until the next midnight", () =>
      Effect.gen(function*() {
        const rl = yield* RateLimiter
        const s = subject("rpd")
        const l = limits({ rpd: 3 })
        for (let i = 2; i >= 0; i--) expect((yield* rl.admit(s, l, 0)).remainingRequests).toBe(i)
        const e = yield* Effect.flip(rl.admit(s, l, 0))
        const untilMidnight = 86_400_000 - (Date.now() % 86_400_000) // Redis runs on this host
        expect(e.limit).toBe("rpd")
        expect(Math.abs(e.retryAfterMs - untilMidnight)).toBeLessThan(5_000)
        expect(e.state.resetRequestsMs).toBe(e.retryAfterMs)
        const day = yield* inspect((r) => Promise.all([r.hgetall(`${prefix}{${s}}:day`), r.pttl(`${prefix}{${s}}:day`)]))
        expect(day[0]).toEqual({ d: String(Math.floor(Date.now() / 86_400_000)), n: "3" })
        expect(day[1]).toBeGreaterThan(0)
        expect(day[1]).toBeLessThanOrEqual(untilMidnight + 5_000) // the counter vanishes at midnight
      }))

    it.effect("all limits null: admitted without touching Redis", () =>
      Effect.gen(function*() {
        const rl = yield* RateLimiter
        const s = subject("none")
        const state = yield* rl.admit(s, limits({}), 1_000_000)
        expect(Object.values(state).every((v) => v === null)).toBe(true)
        yield* rl.settle(s, limits({}), 1_000_000, 0)
        expect(yield* inspect((r) => r.keys(`${prefix}{${s}}*`))).toEqual([])
      }))

    it.effect("window keys expire so idle subjects vanish", () =>
      Effect.gen(function*() {
        const rl = yield* RateLimiter
        const s = subject("ttl")
        yield* rl.admit(s, limits({ rpm: 5, tpm: 100 }), 10)
        const ttls = yield* inspect((r) =>
          Promise.all(["log", "tok", "pend:10"].map((k) => r.pttl(`${prefix}{${s}}:${k}`)))
        )
        for (const ttl of ttls) {
          expect(ttl).toBeGreaterThan(55_000)
          expect(ttl).toBeLessThanOrEqual(61_000)
        }
      }))

    it.effect("falls back to EVAL when the server lost the scripts", () =>
      Effect.gen(function*() {
        const rl = yield* RateLimiter
        const s = subject("noscript")
        yield* inspect((r) => r.script("FLUSH"))
        expect((yield* rl.admit(s, limits({ rpm: 2 }), 0)).remainingRequests).toBe(1)
        expect((yield* rl.admit(s, limits({ rpm: 2 }), 0)).remainingRequests).toBe(0)
      }))
  })
})
