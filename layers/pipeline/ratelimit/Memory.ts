// The in-memory store: one instance's limits, time from Effect's Clock (TestClock drives it).
// Semantics (windows, settlement, header state) are in Windows.ts.
import { Effect } from "effect"
import {
  DAY_MS,
  type LimitName,
  normalize,
  nullState,
  type RateLimiterService,
  RateLimitExceeded,
  type RateLimits,
  type RateLimitState,
  type Snapshot,
  stateOf,
  tokensOf,
  unlimited,
  untilMidnight,
  WINDOW_MS,
  worst
} from "./Windows.js"

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

export const makeMemory = Effect.sync((): RateLimiterService => {
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

  return {
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
  }
})
