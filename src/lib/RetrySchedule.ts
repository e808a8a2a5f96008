// GATEWAY_WEBHOOK_RETRY_SCHEDULE: a comma list of delays (`0s,5s,5m,30m,2h,5h,10h,10h`).
// Entry n (1-based) is the wait before attempt n, so the list length is the number of attempts.
import { Config, ConfigError, Either } from "effect"

/** About 27.6 hours over 8 attempts: the spec's "exponential backoff over about 24 hours". */
export const DEFAULT_RETRY_SCHEDULE = "0s,5s,5m,30m,2h,5h,10h,10h"

const UNIT_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }

/** Delays in milliseconds, or an error message naming the bad entry. */
export const parseRetrySchedule = (text: string): Either.Either<ReadonlyArray<number>, string> => {
  const entries = text.split(",").map((e) => e.trim())
  const delays: Array<number> = []
  for (const entry of entries) {
    const match = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)$/.exec(entry)
    if (match === null) return Either.left(`bad delay "${entry}": expected a number with ms, s, m, h or d`)
    delays.push(Math.round(Number(match[1]) * UNIT_MS[match[2]!]!))
  }
  if (delays.length === 0) return Either.left("the schedule needs at least one delay")
  return Either.right(delays)
}

export const retryScheduleConfig: Config.Config<ReadonlyArray<number>> = Config.string("GATEWAY_WEBHOOK_RETRY_SCHEDULE").pipe(
  Config.withDefault(DEFAULT_RETRY_SCHEDULE),
  Config.mapOrFail((text) =>
    Either.mapLeft(parseRetrySchedule(text), (message) =>
      ConfigError.InvalidData(["GATEWAY_WEBHOOK_RETRY_SCHEDULE"], message))
  )
)

/**
 * After `attemptsMade` attempts have failed: the delay before the next one, or undefined when
 * the schedule is used up (the delivery is then failed for good).
 */
export const nextDelay = (schedule: ReadonlyArray<number>, attemptsMade: number): number | undefined =>
  schedule[attemptsMade]
