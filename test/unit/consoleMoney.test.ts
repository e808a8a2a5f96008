// The console's exact money helpers (src/console/app/money.ts): amounts as the API wrote them,
// sums and the runway in scaled integers.
import { describe, expect, it } from "vitest"
import { compareDecimals, formatUsd, plainDecimal, runwayDays, share, sumDecimals, toUnits } from "../../src/console/app/money.js"

describe("console money", () => {
  it("writes number literals as plain decimals", () => {
    expect(plainDecimal("2e-7")).toBe("0.0000002")
    expect(plainDecimal("1.5E3")).toBe("1500")
    expect(plainDecimal("-0.000035")).toBe("-0.000035")
    expect(plainDecimal("12.5000")).toBe("12.5")
    expect(plainDecimal("123456789.0000000001")).toBe("123456789.0000000001")
  })

  it("shows USD exactly, with at least cents", () => {
    expect(formatUsd("0.00003")).toBe("$0.00003")
    expect(formatUsd("7.5")).toBe("$7.50")
    expect(formatUsd("1234567.891")).toBe("$1,234,567.891")
    expect(formatUsd("-2")).toBe("-$2.00")
    expect(formatUsd(null)).toBe("—")
  })

  it("adds and compares without floats", () => {
    expect(sumDecimals(["0.1", "0.2"])).toBe("0.3")
    expect(sumDecimals(Array.from({ length: 1000 }, () => "0.0000001"))).toBe("0.0001")
    expect(sumDecimals(["123456789.0000000001", "0.0000000001"])).toBe("123456789.0000000002")
    expect(compareDecimals("0.30000000000000001", "0.3")).toBe(1)
    expect(toUnits("1e-18")).toBe(1n)
  })

  it("runway: days at the recent burn, none without spend", () => {
    expect(runwayDays("10", "7", 7)).toBe("10.0")
    expect(runwayDays("1", "3", 7)).toBe("2.3")
    expect(runwayDays("0.0001", "7", 7)).toBe("0")
    expect(runwayDays("10", "0", 7)).toBeNull()
  })

  it("budget bar share is clamped to 0..1", () => {
    expect(share("2.5", "10")).toBe(0.25)
    expect(share("12", "10")).toBe(1)
    expect(share("1", "0")).toBe(1)
  })
})
