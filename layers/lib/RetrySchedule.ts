// GATEWAY_WEBHOOK_RETRY_SCHEDULE: a comma list of delays (`0s,5s,5m,30m,2h,5h,10h,10h`).
// Entry n (1-based) is the wait before attempt n, so the list length is the number of attempts.
import { Config, ConfigError, Either } from "effect"
import { DURATION_FORMAT, parseDurationMs } from "./ConfigValues.js"

/** About 27.6 hours over 8 attempts: the spec's "exponential backoff over about 24 hours". */
export const DEFAULT_RETRY_SCHEDULE = "0s,5s,5m,30m,2h,5h,10h,10h"

/** Delays in milliseconds (each entry in the duration format, `d` for days too), or an error message naming the bad entry. */
export const parseRetrySchedule = (text: string): Either.Either<ReadonlyArray<number>, string> => {
  const delays: Array<number> = []
  for (const entry of text.split(",").map((e) => e.trim())) {
    const delay = parseDurationMs(entry)
    if (delay === undefined) return Either.left(`bad delay "${entry}": expected ${DURATION_FORMAT} (or 1d)`)
    delays.push(delay)
  }
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
