// The two formats of limit variables: durations (`500ms`, `30s`, `5m`, `1h`, or plain
// milliseconds) and sizes (`64kb`, `10mb`, `1gb`, binary multiples, or plain bytes). A bad value
// stops the start with a message that names the variable and what it expected.
import { Config, ConfigError, Either } from "effect"

const DURATION_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 }
const SIZE_BYTES: Record<string, number> = { b: 1, kb: 1024, mb: 1024 ** 2, gb: 1024 ** 3 }

const parseWithUnits = (text: string, units: Record<string, number>, defaultUnit: string): number | undefined => {
  const match = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/.exec(text.trim().toLowerCase())
  if (match === null) return undefined
  const factor = units[match[2] === "" ? defaultUnit : match[2]!]
  if (factor === undefined) return undefined
  const value = Math.round(Number(match[1]) * factor)
  return Number.isSafeInteger(value) ? value : undefined
}

/** Milliseconds from `500ms`, `30s`, `5m`, `1h` or a plain number of milliseconds. */
export const parseDurationMs = (text: string): number | undefined => parseWithUnits(text, DURATION_MS, "ms")

/** Bytes from `512b`, `64kb`, `10mb`, `1gb` (multiples of 1024) or a plain number of bytes. */
export const parseBytes = (text: string): number | undefined => parseWithUnits(text, SIZE_BYTES, "b")

const withUnits = (
  name: string,
  parse: (text: string) => number | undefined,
  expected: string,
  fallback: number,
  min: number
): Config.Config<number> =>
  Config.string(name).pipe(
    Config.map((text): number | undefined => parse(text)),
    Config.mapOrFail((value) =>
      value !== undefined && value >= min
        ? Either.right(value)
        : Either.left(ConfigError.InvalidData([name], `expected ${expected}${min > 0 ? ` of at least ${min}` : ""}`))
    ),
    Config.withDefault(fallback)
  )

/** A duration variable in milliseconds (see parseDurationMs); `min` is the least value allowed. */
export const durationMsConfig = (name: string, fallbackMs: number, min = 0): Config.Config<number> =>
  withUnits(name, parseDurationMs, "a duration such as 500ms, 30s, 5m, 1h or plain milliseconds", fallbackMs, min)

/** A size variable in bytes (see parseBytes); `min` is the least value allowed. */
export const bytesConfig = (name: string, fallbackBytes: number, min = 1): Config.Config<number> =>
  withUnits(name, parseBytes, "a size such as 64kb, 10mb or plain bytes", fallbackBytes, min)

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
