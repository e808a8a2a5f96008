// The rate limiter's shared vocabulary: limits, header state, the refusal error, the service shape,
// and the window/snapshot arithmetic both stores (Memory, Redis) decide with.
import { Data, type Effect } from "effect"

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

/** The RateLimiter service; both stores build one. */
export interface RateLimiterService {
  /** Admits one request of `estimatedTokens` for `subject` (an end user id) or fails; all-or-nothing: a refused request consumes nothing. */
  readonly admit: (subject: string, limits: RateLimits, estimatedTokens: number) => Effect.Effect<RateLimitState, RateLimitExceeded>
  /** After the call: replace the admission's token estimate with the actual usage in the tpm window (delta may be negative). */
  readonly settle: (subject: string, limits: RateLimits, estimatedTokens: number, actualTokens: number) => Effect.Effect<void>
}

// Semantics both stores implement.
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

export const WINDOW_MS = 60_000
export const DAY_MS = 86_400_000

export const nullState: RateLimitState = {
  limitRequests: null,
  remainingRequests: null,
  resetRequestsMs: null,
  limitTokens: null,
  remainingTokens: null,
  resetTokensMs: null
}

/** A subject's usage at one instant, as both stores report it. */
export interface Snapshot {
  readonly count: number // log entries in the window
  readonly tokens: number // tokens in the window
  readonly oldestResetMs: number // ms until the oldest log entry leaves the window; 0 if none
  readonly today: number // requests counted for the current UTC date
  readonly untilMidnightMs: number
}

export const untilMidnight = (now: number) => DAY_MS - (((now % DAY_MS) + DAY_MS) % DAY_MS)

export const normalize = (limits: RateLimits): RateLimits => {
  const n = (x: number | null) => (x === null || !Number.isFinite(x) ? null : Math.max(0, Math.floor(x)))
  return { rpm: n(limits.rpm), tpm: n(limits.tpm), rpd: n(limits.rpd) }
}
export const tokensOf = (n: number) => (Number.isFinite(n) ? Math.max(0, Math.ceil(n)) : 0)
export const unlimited = (l: RateLimits) => l.rpm === null && l.tpm === null && l.rpd === null

export const stateOf = (l: RateLimits, s: Snapshot): RateLimitState => {
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

export type LimitName = RateLimitExceeded["limit"]

/** Picks the binding refusal: the longest wait. */
export const worst = (refusals: ReadonlyArray<readonly [LimitName, number]>): readonly [LimitName, number] | undefined =>
  refusals.reduce<readonly [LimitName, number] | undefined>((acc, r) => (acc === undefined || r[1] > acc[1] ? r : acc), undefined)
