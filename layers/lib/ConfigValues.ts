// The two formats of limit variables: durations (`500ms`, `30s`, `5m`, `1h`, or plain
// milliseconds) and sizes (`64kb`, `10mb`, `1gb`, binary multiples, or plain bytes). A bad value
// stops the start with a message that names the variable and what it expected.
import { Config, ConfigError, Either, Option } from "effect"

const SECOND = 1_000
const MINUTE = 60 * SECOND
const HOUR = 60 * MINUTE
const DAY = 24 * HOUR
// The short units are the documented ones; the words are Effect's Config.duration spelling
// (`30 seconds`, `0 millis`), which some variables took, so existing settings keep starting.
const DURATION_MS: Record<string, number> = {
  ms: 1, milli: 1, millis: 1, millisecond: 1, milliseconds: 1,
  s: SECOND, sec: SECOND, secs: SECOND, second: SECOND, seconds: SECOND,
  m: MINUTE, min: MINUTE, mins: MINUTE, minute: MINUTE, minutes: MINUTE,
  h: HOUR, hour: HOUR, hours: HOUR,
  d: DAY, day: DAY, days: DAY,
  week: 7 * DAY, weeks: 7 * DAY
}
const SIZE_BYTES: Record<string, number> = { b: 1, kb: 1024, mb: 1024 ** 2, gb: 1024 ** 3 }

const parseWithUnits = (text: string, units: Record<string, number>, defaultUnit: string): number | undefined => {
  const match = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/.exec(text.trim().toLowerCase())
  if (match === null) return undefined
  const unit = match[2] === "" ? defaultUnit : match[2]!
  if (!Object.hasOwn(units, unit)) return undefined
  const value = Math.round(Number(match[1]) * units[unit]!)
  return Number.isSafeInteger(value) ? value : undefined
}

/**
 * Milliseconds from `500ms`, `30s`, `5m`, `1h`, `1d` or a plain number of milliseconds; also
 * Effect's words (`30 seconds`, `0 millis`, `5 minutes`). Negative values are refused.
 */
export const parseDurationMs = (text: string): number | undefined => parseWithUnits(text, DURATION_MS, "ms")

/** Bytes from `512b`, `64kb`, `10mb`, `1gb` (multiples of 1024) or a plain number of bytes. */
export const parseBytes = (text: string): number | undefined => parseWithUnits(text, SIZE_BYTES, "b")

/** What a duration variable's error message says it expected. */
export const DURATION_FORMAT = "a duration such as 500ms, 30s, 5m, 1h or plain milliseconds"

/** The value read for `name`, or the error that names the variable and the format. */
const verdict = (name: string, value: number | undefined, expected: string, min: number) =>
  value !== undefined && value >= min
    ? Either.right(value)
    : Either.left(ConfigError.InvalidData([name], `expected ${expected}${min > 0 ? ` of at least ${min}` : ""}`))

const withUnits = (
  name: string,
  parse: (text: string) => number | undefined,
  expected: string,
  min: number
): Config.Config<number> =>
  Config.string(name).pipe(
    Config.map((text): number | undefined => parse(text)),
    Config.mapOrFail((value) => verdict(name, value, expected, min))
  )

/**
 * A duration variable in milliseconds (see parseDurationMs); `min` is the least value allowed.
 * `formerName` (a `*_MS` name the variable had) is read when `name` is unset, in the same format.
 */
export const durationMsConfig = (name: string, fallbackMs: number, min = 0, formerName?: string): Config.Config<number> =>
  formerName === undefined
    ? withUnits(name, parseDurationMs, DURATION_FORMAT, min).pipe(Config.withDefault(fallbackMs))
    : Config.all([Config.option(Config.string(name)), Config.option(Config.string(formerName))]).pipe(
      Config.mapOrFail(([text, former]) =>
        Option.isSome(text)
          ? verdict(name, parseDurationMs(text.value), DURATION_FORMAT, min)
          : Option.isSome(former)
          ? verdict(formerName, parseDurationMs(former.value), DURATION_FORMAT, min)
          : Either.right(fallbackMs)
      )
    )

/** A size variable in bytes (see parseBytes); `min` is the least value allowed. */
export const bytesConfig = (name: string, fallbackBytes: number, min = 1): Config.Config<number> =>
  withUnits(name, parseBytes, "a size such as 64kb, 10mb or plain bytes", min).pipe(Config.withDefault(fallbackBytes))

/** A count variable (connections, sessions, endpoints): a whole number of at least `min`. */
export const countConfig = (name: string, fallback: number, min = 1): Config.Config<number> =>
  Config.integer(name).pipe(
    Config.mapOrFail((value) =>
      value >= min ? Either.right(value) : Either.left(ConfigError.InvalidData([name], `expected a whole number of at least ${min}`))
    ),
    Config.withDefault(fallback)
  )

/**
 * DATABASE_URL unset: the gateway runs its embedded Postgres, the laptop demo. Defaults that are
 * right there and wrong on a server follow it (HOST, GATEWAY_DEMO, GATEWAY_ALLOW_PRIVATE_URLS).
 */
export const embeddedDatabase: Config.Config<boolean> = Config.option(Config.string("DATABASE_URL")).pipe(
  Config.map((url) => url._tag === "None")
)

/** `config`, or when it is not set, `fallback` (an invalid value still fails). */
export const withDefaultFrom = <A>(config: Config.Config<A>, fallback: Config.Config<A>): Config.Config<A> =>
  Config.option(config).pipe(
    Config.zipWith(fallback, (value, otherwise) => value._tag === "Some" ? value.value : otherwise)
  )
