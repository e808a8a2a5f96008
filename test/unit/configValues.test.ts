// The limit variables' two formats: durations and sizes, with units or plain numbers; a bad
// value is refused with the variable's name, a missing one takes the default.
import { ConfigProvider, Effect, Either } from "effect"
import { describe, expect, it } from "vitest"
import { bytesConfig, countConfig, durationMsConfig, parseBytes, parseDurationMs } from "../../src/lib/ConfigValues.js"

const read = <A>(config: Effect.Effect<A, unknown>, env: Record<string, string>) =>
  Effect.runSync(Effect.either(config.pipe(Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))))

describe("limit variables", () => {
  it("reads durations with units or as plain milliseconds", () => {
    expect([parseDurationMs("500ms"), parseDurationMs("30s"), parseDurationMs("5m"), parseDurationMs("1h"), parseDurationMs("250")])
      .toEqual([500, 30_000, 300_000, 3_600_000, 250])
    expect([parseDurationMs("0"), parseDurationMs("1.5s"), parseDurationMs(" 2 s ")]).toEqual([0, 1_500, 2_000])
    expect([parseDurationMs("5 minutes"), parseDurationMs("-1s"), parseDurationMs("s"), parseDurationMs("1d")]).toEqual([undefined, undefined, undefined, undefined])
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
})
