// The limit variables' two formats: durations and sizes, with units or plain numbers; a bad
// value is refused with the variable's name, a missing one takes the default. Every time
// variable reads the one duration format, Effect's spelling included (older settings).
import { ConfigProvider, Effect, Either } from "effect"
import { describe, expect, it } from "vitest"
import { bytesConfig, countConfig, durationMsConfig, parseBytes, parseDurationMs } from "../../layers/lib/ConfigValues.js"

const read = <A>(config: Effect.Effect<A, unknown>, env: Record<string, string>) =>
  Effect.runSync(Effect.either(config.pipe(Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))))

describe("limit variables", () => {
  it("reads durations with units or as plain milliseconds", () => {
    expect([parseDurationMs("500ms"), parseDurationMs("30s"), parseDurationMs("5m"), parseDurationMs("1h"), parseDurationMs("250")])
      .toEqual([500, 30_000, 300_000, 3_600_000, 250])
    expect([parseDurationMs("0"), parseDurationMs("0ms"), parseDurationMs("1.5s"), parseDurationMs(" 2 s "), parseDurationMs("1d"), parseDurationMs("30S")])
      .toEqual([0, 0, 1_500, 2_000, 86_400_000, 30_000])
  })

  it("reads Effect's duration words, as variables read with Config.duration took them", () => {
    const words = ["30 seconds", "0 millis", "5 minutes", "1 second", "25 millis", "2 hours", "1 day", "1 week", "10 secs", "2 mins", "1 hour"]
    expect(words.map(parseDurationMs)).toEqual([30_000, 0, 300_000, 1_000, 25, 7_200_000, 86_400_000, 604_800_000, 10_000, 120_000, 3_600_000])
  })

  it("refuses negative, unitless-garbage and empty durations", () => {
    const bad = ["-1", "-1s", "5x", "", " ", "s", "1e3", "1 fortnight", "constructor", "5constructor", "1.s", "0x10"]
    expect(bad.map(parseDurationMs)).toEqual(bad.map(() => undefined))
  })

  it("reads sizes with binary units or as plain bytes", () => {
    expect([parseBytes("64kb"), parseBytes("10MB"), parseBytes("1gb"), parseBytes("4096"), parseBytes("12b")])
      .toEqual([65_536, 10_485_760, 1_073_741_824, 4096, 12])
    expect([parseBytes("10 megs"), parseBytes("-5"), parseBytes("1e3")]).toEqual([undefined, undefined, undefined])
  })

  it("takes the default when unset and refuses a bad or too small value by name", () => {
    expect(read(durationMsConfig("T", 30_000), {})).toEqual(Either.right(30_000))
    expect(read(durationMsConfig("T", 30_000), { T: "5s" })).toEqual(Either.right(5_000))
    const bad = read(durationMsConfig("T", 30_000), { T: "soon" })
    expect(Either.isLeft(bad) && String(bad.left)).toContain("T")
    expect(Either.isLeft(read(bytesConfig("B", 1024), { B: "0" }))).toBe(true)
    expect(read(bytesConfig("B", 1024), { B: "2kb" })).toEqual(Either.right(2048))
    expect(Either.isLeft(read(countConfig("N", 10), { N: "0" }))).toBe(true)
    expect(read(countConfig("N", 10), { N: "3" })).toEqual(Either.right(3))
  })

  it("holds a duration variable to its least value and names the format", () => {
    expect(read(durationMsConfig("T", 1_000), { T: "0" })).toEqual(Either.right(0))
    expect(read(durationMsConfig("T", 1_000), { T: "0 millis" })).toEqual(Either.right(0))
    const zero = read(durationMsConfig("T", 30_000, 1), { T: "0" })
    expect(Either.isLeft(zero) && String(zero.left)).toContain("at least 1")
    for (const text of ["-1", "5x", ""]) {
      const refused = read(durationMsConfig("T", 30_000), { T: text })
      expect(Either.isLeft(refused) && String(refused.left)).toMatch(/T.*a duration such as 500ms, 30s, 5m, 1h or plain milliseconds/)
    }
  })

  it("reads a former *_MS name when the new one is unset, in the same format", () => {
    const timeout = durationMsConfig("T", 60_000, 1, "T_MS")
    expect(read(timeout, {})).toEqual(Either.right(60_000))
    expect(read(timeout, { T_MS: "500" })).toEqual(Either.right(500))
    expect(read(timeout, { T_MS: "2s" })).toEqual(Either.right(2_000))
    expect(read(timeout, { T: "3s", T_MS: "500" })).toEqual(Either.right(3_000))
    // A bad value is refused by its name; a bad new value does not fall back to the old one.
    const badFormer = read(timeout, { T_MS: "soon" })
    expect(Either.isLeft(badFormer) && String(badFormer.left)).toContain("T_MS")
    const badNew = read(timeout, { T: "soon", T_MS: "500" })
    expect(Either.isLeft(badNew) && String(badNew.left)).toMatch(/\bT\b.*a duration/)
    expect(Either.isLeft(read(timeout, { T_MS: "0" }))).toBe(true)
  })
})
