// RateLimiter.layerMemory driven by TestClock: sliding rpm/tpm windows, settlement, the UTC-midnight
// rpd reset, all-or-nothing refusals, header state, and exactness under concurrent fibers.
import { expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either, Layer, TestClock } from "effect"
import { RateLimiter, RateLimitExceeded, type RateLimits } from "../../layers/pipeline/RateLimiter.js"

let n = 0
const subject = (name: string) => `${name}-${++n}`
const limits = (l: Partial<RateLimits>): RateLimits => ({ rpm: null, tpm: null, rpd: null, ...l })

const refusal = <A>(self: Effect.Effect<A, RateLimitExceeded>) =>
  Effect.flip(self).pipe(Effect.tap((e) => expect(e).toBeInstanceOf(RateLimitExceeded)))

it.layer(RateLimiter.layerMemory)("RateLimiter (memory)", (it) => {
  it.effect("rpm 3: the 4th is refused until the first admission leaves the window", () =>
    Effect.gen(function*() {
      const rl = yield* RateLimiter
      const s = subject("rpm")
      const l = limits({ rpm: 3 })
      yield* TestClock.setTime(0)
      const first = yield* rl.admit(s, l, 0)
      expect(first).toEqual({
        limitRequests: 3, remainingRequests: 2, resetRequestsMs: 60_000,
        limitTokens: null, remainingTokens: null, resetTokensMs: null
      })
      yield* TestClock.adjust("10 seconds")
      yield* rl.admit(s, l, 0)
      yield* TestClock.adjust("10 seconds")
      const third = yield* rl.admit(s, l, 0)
      expect(third.remainingRequests).toBe(0)
      expect(third.resetRequestsMs).toBe(40_000) // the first (t=0) frees at t=60 s
      yield* TestClock.adjust("10 seconds") // t = 30 s
      const e = yield* refusal(rl.admit(s, l, 0))
      expect(e.limit).toBe("rpm")
      expect(e.retryAfterMs).toBe(30_000)
      expect(e.state.remainingRequests).toBe(0)
      yield* TestClock.setTime(59_999)
      expect((yield* refusal(rl.admit(s, l, 0))).retryAfterMs).toBe(1)
      yield* TestClock.setTime(60_000)
      const again = yield* rl.admit(s, l, 0)
      expect(again.remainingRequests).toBe(0)
      expect(again.resetRequestsMs).toBe(10_000) // now the t=10 s admission is the oldest
    }))

  it.effect("the window slides: slots free one at a time, not all at once", () =>
    Effect.gen(function*() {
      const rl = yield* RateLimiter
      const s = subject("slide")
      const l = limits({ rpm: 2 })
      yield* TestClock.setTime(0)
      yield* rl.admit(s, l, 0) // t=0
      yield* TestClock.setTime(45_000)
      yield* rl.admit(s, l, 0) // t=45
      // a fixed minute window [60, 120) would admit two here; the sliding one frees only t=0
      yield* TestClock.setTime(61_000)
      yield* rl.admit(s, l, 0)
      const e = yield* refusal(rl.admit(s, l, 0))
      expect(e.retryAfterMs).toBe(44_000) // t=45 frees at 105
      yield* TestClock.setTime(105_000)
      yield* rl.admit(s, l, 0)
      yield* refusal(rl.admit(s, l, 0))
    }))

  it.effect("tpm counts estimates; settle lowering usage lets the next request in", () =>
    Effect.gen(function*() {
      const rl = yield* RateLimiter
      const s = subject("tpm")
      const l = limits({ tpm: 1000 })
      yield* TestClock.setTime(0)
      const a = yield* rl.admit(s, l, 600)
      expect(a).toEqual({
        limitRequests: null, remainingRequests: null, resetRequestsMs: null,
        limitTokens: 1000, remainingTokens: 400, resetTokensMs: 60_000
      })
      yield* TestClock.adjust("5 seconds")
      const e = yield* refusal(rl.admit(s, l, 500))
      expect(e.limit).toBe("tpm")
      expect(e.retryAfterMs).toBe(55_000)
      expect(e.state.remainingTokens).toBe(400)
      yield* rl.settle(s, l, 600, 100) // delta -500
      const b = yield* rl.admit(s, l, 500)
      expect(b.remainingTokens).toBe(400)
    }))

  it.effect("settle corrects at the admission's timestamp: the corrected tokens leave with it", () =>
    Effect.gen(function*() {
      const rl = yield* RateLimiter
      const s = subject("tpm-at")
      const l = limits({ tpm: 1000 })
      yield* TestClock.setTime(0)
      yield* rl.admit(s, l, 300)
      yield* TestClock.setTime(30_000)
      yield* rl.settle(s, l, 300, 900) // the call used more than estimated
      const e = yield* refusal(rl.admit(s, l, 200))
      expect(e.state.remainingTokens).toBe(100)
      expect(e.retryAfterMs).toBe(30_000) // the t=0 entry, now 900 tokens, leaves at 60 s
      yield* TestClock.setTime(60_000)
      expect((yield* rl.admit(s, l, 200)).remainingTokens).toBe(800)
    }))

  it.effect("a settlement after its admission left the window is dropped", () =>
    Effect.gen(function*() {
      const rl = yield* RateLimiter
      const s = subject("tpm-late")
      const l = limits({ tpm: 1000 })
      yield* TestClock.setTime(0)
      yield* rl.admit(s, l, 100)
      yield* TestClock.setTime(70_000)
      yield* rl.settle(s, l, 100, 5000)
      expect((yield* rl.admit(s, l, 1000)).remainingTokens).toBe(0)
    }))

  it.effect("an estimate above tpm is refused even on an empty window", () =>
    Effect.gen(function*() {
      const rl = yield* RateLimiter
      const s = subject("tpm-big")
      yield* TestClock.setTime(0)
      const e = yield* refusal(rl.admit(s, limits({ tpm: 1000 }), 1001))
      expect(e.limit).toBe("tpm")
      expect(e.retryAfterMs).toBe(60_000)
      expect(e.state.remainingTokens).toBe(1000)
      expect((yield* rl.admit(s, limits({ tpm: 1000 }), 1000)).remainingTokens).toBe(0)
    }))

  it.effect("rpd resets at UTC midnight, not 24 h after the first request", () =>
    Effect.gen(function*() {
      const rl = yield* RateLimiter
      const s = subject("rpd")
      const l = limits({ rpd: 2 })
      yield* TestClock.setTime(Date.UTC(2025, 0, 1, 12, 0, 0))
      yield* rl.admit(s, l, 0)
      yield* TestClock.setTime(Date.UTC(2025, 0, 1, 23, 59, 59, 500))
      const second = yield* rl.admit(s, l, 0)
      expect(second).toMatchObject({ limitRequests: 2, remainingRequests: 0, resetRequestsMs: 500 })
      const e = yield* refusal(rl.admit(s, l, 0))
      expect(e.limit).toBe("rpd")
      expect(e.retryAfterMs).toBe(500)
      yield* TestClock.adjust("1 second")
      const next = yield* rl.admit(s, l, 0)
      expect(next.remainingRequests).toBe(1)
      expect(next.resetRequestsMs).toBe(86_400_000 - 500)
    }))

  it.effect("a refused request consumes nothing", () =>
    Effect.gen(function*() {
      const rl = yield* RateLimiter
      const s = subject("atomic")
      const l = limits({ rpm: 2, tpm: 100, rpd: 10 })
      yield* TestClock.setTime(0)
      yield* rl.admit(s, l, 50)
      expect((yield* refusal(rl.admit(s, l, 60))).limit).toBe("tpm") // neither a request slot nor tokens
      const ok = yield* rl.admit(s, l, 40)
      expect(ok).toMatchObject({ remainingRequests: 0, remainingTokens: 10 })
      const byRpm = yield* refusal(rl.admit(s, l, 5))
      expect(byRpm.limit).toBe("rpm")
      expect(byRpm.state).toMatchObject({ remainingRequests: 0, remainingTokens: 10 })
      // the rpd counter did not move either: 2 of 10 used
      const rpdOnly = yield* rl.admit(s, limits({ rpd: 10 }), 0)
      expect(rpdOnly.remainingRequests).toBe(7)
    }))

  it.effect("several refusals: the longest wait wins", () =>
    Effect.gen(function*() {
      const rl = yield* RateLimiter
      const s = subject("worst")
      yield* TestClock.setTime(Date.UTC(2025, 0, 1, 12, 0, 0))
      const l = limits({ rpm: 1, rpd: 1 })
      yield* rl.admit(s, l, 0)
      const e = yield* refusal(rl.admit(s, l, 0))
      expect(e.limit).toBe("rpd")
      expect(e.retryAfterMs).toBe(12 * 3_600_000)
    }))

  it.effect("all limits null: admitted, state all null, nothing recorded", () =>
    Effect.gen(function*() {
      const rl = yield* RateLimiter
      const s = subject("none")
      const none = limits({})
      for (let i = 0; i < 1000; i++) {
        expect(yield* rl.admit(s, none, 1_000_000)).toEqual({
          limitRequests: null, remainingRequests: null, resetRequestsMs: null,
          limitTokens: null, remainingTokens: null, resetTokensMs: null
        })
      }
      yield* rl.settle(s, none, 1_000_000, 0)
      // nothing counted while unlimited
      expect((yield* rl.admit(s, limits({ rpm: 1 }), 0)).remainingRequests).toBe(0)
    }))

  it.effect("state reports the tighter of rpm and rpd", () =>
    Effect.gen(function*() {
      const rl = yield* RateLimiter
      yield* TestClock.setTime(Date.UTC(2025, 0, 1, 23, 0, 0))
      const byRpd = yield* rl.admit(subject("tight"), limits({ rpm: 10, rpd: 3, tpm: 500 }), 100)
      expect(byRpd).toEqual({
        limitRequests: 3, remainingRequests: 2, resetRequestsMs: 3_600_000,
        limitTokens: 500, remainingTokens: 400, resetTokensMs: 60_000
      })
      const byRpm = yield* rl.admit(subject("tight"), limits({ rpm: 2, rpd: 100 }), 0)
      expect(byRpm).toMatchObject({ limitRequests: 2, remainingRequests: 1, resetRequestsMs: 60_000 })
    }))

  it.effect("exact under concurrent fibers: 200 admits, rpm 50 -> 50; tpm 1000 at 30 each -> 33", () =>
    Effect.gen(function*() {
      const rl = yield* RateLimiter
      yield* TestClock.setTime(0)
      const s1 = subject("par-rpm")
      const r1 = yield* Effect.forEach(Array.from({ length: 200 }), () => Effect.either(rl.admit(s1, limits({ rpm: 50 }), 0)), {
        concurrency: "unbounded"
      })
      expect(r1.filter(Either.isRight)).toHaveLength(50)
      const s2 = subject("par-tpm")
      const r2 = yield* Effect.forEach(Array.from({ length: 100 }), () => Effect.either(rl.admit(s2, limits({ tpm: 1000 }), 30)), {
        concurrency: "unbounded"
      })
      expect(r2.filter(Either.isRight)).toHaveLength(33)
    }))
})

it.effect("layerFromConfig without REDIS_URL is the memory limiter", () =>
  Effect.gen(function*() {
    const rl = yield* RateLimiter
    yield* rl.admit("cfg", limits({ rpm: 1 }), 0)
    expect((yield* Effect.flip(rl.admit("cfg", limits({ rpm: 1 }), 0))).limit).toBe("rpm")
  }).pipe(
    Effect.provide(RateLimiter.layerFromConfig.pipe(
      Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["OTHER", "x"]]))))
    ))
  ))
