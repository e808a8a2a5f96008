// The body check's scan (layers/lib/JsonText.ts), the exactness rule for number literals
// (layers/lib/JsonNumbers.ts), money parsing with its bounds (layers/lib/Money.ts), the money schemas
// and storable text, without HTTP. Random JSON from fast-check drives the properties.
import { BigDecimal, FastCheck as fc, Schema } from "effect"
import { describe, expect, it } from "vitest"
import { Money, MoneyNumber } from "../../schemas/Common.js"
import { losesPrecision, mustQuote } from "../../layers/lib/JsonNumbers.js"
import { type JsonTextScan, MAX_CHECKED_NUMBERS, scanJsonText } from "../../layers/lib/JsonText.js"
import { parseMoney, perMillion } from "../../layers/lib/Money.js"
import { findUnstorable, isStorableText, toStorable, toStorableText } from "../../layers/lib/StorableText.js"

const scan = (text: string, depth = 64): JsonTextScan => {
  const result = scanJsonText(text, depth)
  if (typeof result === "string") throw new Error(`scan refused: ${result}`)
  return result
}

/** Nesting depth as the parser sees it. */
const depthOf = (value: unknown): number =>
  Array.isArray(value)
    ? 1 + Math.max(0, ...value.map(depthOf))
    : value !== null && typeof value === "object"
    ? 1 + Math.max(0, ...Object.values(value).map(depthOf))
    : 0

/** What `mustQuote` is told by the scan: mantissa digits without leading/trailing zeros. */
const significantOf = (literal: string) => {
  const mantissa = literal.replace(/^-/, "").split(/[eE]/)[0]!.replace(".", "")
  return mantissa.replace(/^0+/, "").replace(/0+$/, "").length
}

describe("scanJsonText", () => {
  it("leaves ordinary bodies as they are: the same string, nothing flagged", () => {
    const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "a [ { \" \\ } ] 1e309 \u00e9 😀" }], max_tokens: 64, temperature: 0.7, seed: -3 })
    const result = scan(body)
    expect(result.text).toBe(body)
    expect(result.unstorableEscape).toBe(false)
  })

  it("agrees with the parser on depth, for any JSON", () => {
    fc.assert(fc.property(fc.jsonValue({ maxDepth: 8 }), fc.integer({ min: 0, max: 8 }), (value, limit) => {
      const text = JSON.stringify(value)
      expect(scanJsonText(text, limit) === "too_deep").toBe(depthOf(value) > limit)
    }), { numRuns: 2000 })
  })

  it("quotes exactly the literals a float64 cannot hold; the rest parses to the same value", () => {
    const literals = fc.oneof(
      fc.double({ noNaN: true, noDefaultInfinity: true }).map(String),
      fc.bigInt({ min: -(10n ** 25n), max: 10n ** 25n }).map(String),
      fc.tuple(fc.bigInt({ min: 0n, max: 10n ** 30n }), fc.integer({ min: 0, max: 30 }), fc.integer({ min: -400, max: 400 }))
        .map(([digits, point, exp]) => {
          const s = digits.toString()
          const at = Math.max(1, s.length - point)
          return `${s.slice(0, at)}${at < s.length ? `.${s.slice(at)}` : ""}e${exp}`
        })
    ).filter((l) => !l.includes("Infinity") && /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$/.test(l))
    fc.assert(fc.property(fc.array(literals, { maxLength: 6 }), (list) => {
      const text = `{"a":[${list.join(",")}],"s":"${list.join(" ")}"}`
      const parsed = JSON.parse(scan(text).text)
      list.forEach((literal, i) => {
        if (losesPrecision(literal)) expect(parsed.a[i]).toBe(literal)
        else expect(parsed.a[i]).toBe(Number(literal))
      })
      expect(parsed.s).toBe(list.join(" "))
    }), { numRuns: 3000 })
  })

  it("the scan's cheap rule agrees with the exact one", () => {
    for (const literal of ["1e309", "-1e309", "1e-400", "5e-324", "1e-320", "0e99999", "1" + "0".repeat(400), "0." + "0".repeat(400) + "1",
      "0.30000000000000004", "0.1000000000000000001", "9007199254740993", "9007199254740992", "123456789.0000000001", "1.5e300", "2.2250738585072014e-308"]) {
      expect(mustQuote(literal, significantOf(literal), /e/i.test(literal)), literal).toBe(losesPrecision(literal))
    }
  })

  it("never makes invalid JSON valid: malformed literals are left for the parser", () => {
    for (const text of ["[01234567890123456789]", "[1.2.3.4.5.6.7.8.9.0.1.2.3.4.5.6.7]", "[1e309e5]", "[-]", "[1e]"]) {
      expect(() => JSON.parse(scan(text).text), text).toThrow()
    }
  })

  it("refuses a body with more than MAX_CHECKED_NUMBERS literals that need the exact check; short ones are free", () => {
    const list = (literal: string, n: number) => `[${Array(n).fill(literal).join(",")}]`
    for (const literal of ["1e309", "0.12345678901234567", "0.30000000000000004"]) {
      expect(typeof scanJsonText(list(literal, MAX_CHECKED_NUMBERS), 64), literal).toBe("object")
      expect(scanJsonText(list(literal, MAX_CHECKED_NUMBERS + 1), 64), literal).toBe("too_many_long_numbers")
    }
    expect(typeof scanJsonText(list("1.5e3", 2 * MAX_CHECKED_NUMBERS), 64)).toBe("object")
  })

  it("flags NUL and unpaired surrogate escapes, in keys and values, and nothing else", () => {
    fc.assert(fc.property(fc.jsonValue({ maxDepth: 4 }), (value) => {
      const text = JSON.stringify(value)
      expect(scan(text).unstorableEscape).toBe(findUnstorable(JSON.parse(text)) !== undefined)
    }), { numRuns: 3000 })
    const pieces = ["\u0000", "\ud800", "\udc00", "\ud83d\ude00", "\udbff\udfff", "a", "\"", "\\", "\u00e9"]
    fc.assert(fc.property(fc.array(fc.constantFrom(...pieces), { maxLength: 8 }), fc.boolean(), (parts, upper) => {
      const s = parts.join("")
      let text = JSON.stringify({ [s]: [s] })
      // Clients spell escapes in either case, and some escape everything (`ensure_ascii`).
      text = text.replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`)
      if (upper) text = text.replace(/\\u([0-9a-f]{4})/g, (_m, h: string) => `\\u${h.toUpperCase()}`)
      expect(scan(text).unstorableEscape).toBe(!isStorableText(s))
    }), { numRuns: 3000 })
  })
})

describe("money", () => {
  it("a cost per million tokens is tokens x price / 10^6 exactly", () => {
    const million = BigDecimal.fromBigInt(1_000_000n)
    expect(BigDecimal.format(BigDecimal.normalize(perMillion(14, BigDecimal.unsafeFromString("0.6"))))).toBe("0.0000084")
    expect(BigDecimal.format(BigDecimal.normalize(perMillion(3_000_000, BigDecimal.unsafeFromString("2.50"))))).toBe("7.5")
    expect(BigDecimal.isZero(perMillion(0, BigDecimal.unsafeFromString("15")))).toBe(true)
    fc.assert(fc.property(fc.nat(), fc.bigInt(0n, 10n ** 14n), fc.nat(12), (tokens, digits, scale) => {
      const price = BigDecimal.make(digits, scale)
      const divided = BigDecimal.unsafeDivide(BigDecimal.multiply(BigDecimal.fromBigInt(BigInt(tokens)), price), million)
      expect(BigDecimal.equals(perMillion(tokens, price), divided)).toBe(true)
    }), { numRuns: 2000 })
  })

  it("is exact to 10 decimal places and below 10^12; refuses the rest with a reason", () => {
    const ok = (text: string) => {
      const value = parseMoney(text)
      if (typeof value === "string") throw new Error(`${text}: ${value}`)
      return BigDecimal.format(value)
    }
    expect(ok("0.1")).toBe("0.1")
    expect(ok("123456789.0000000001")).toBe("123456789.0000000001")
    expect(ok("999999999999.9999999999")).toBe("999999999999.9999999999")
    expect(ok("-5.50")).toBe("-5.5")
    expect(ok("1.0000000000000000000000")).toBe("1")
    expect(ok("1e-10")).toBe("0.0000000001")
    expect(parseMoney("1e-11")).toMatch(/decimal places/)
    expect(parseMoney("1e-30")).toMatch(/decimal places/)
    expect(parseMoney("0.123456789012345678901234567890")).toMatch(/decimal places/)
    expect(parseMoney("1000000000000")).toMatch(/less than/)
    expect(parseMoney("1e300")).toMatch(/less than/)
    expect(parseMoney("1e99999999999999999999")).toMatch(/less than/)
    expect(parseMoney("12,50")).toMatch(/decimal number/)
    expect(parseMoney("Infinity")).toMatch(/decimal number/)
  })

  it("the schema takes a JSON number or a string and encodes an exact string", () => {
    const decode = Schema.decodeUnknownSync(Money)
    expect(BigDecimal.format(decode("123456789.0000000001"))).toBe("123456789.0000000001")
    expect(BigDecimal.format(decode(0.1))).toBe("0.1")
    expect(() => decode(Infinity)).toThrow(/decimal number/)
    expect(() => decode(1e300)).toThrow(/less than/)
    expect(() => decode(true)).toThrow()
    expect(Schema.encodeSync(Money)(decode(25.5))).toBe(Schema.encodeSync(Money)(decode("25.50")))
    expect(() => Schema.decodeUnknownSync(MoneyNumber)(1e-11)).toThrow(/decimal places/)
    expect(Schema.decodeUnknownSync(MoneyNumber)(0.25)).toBe(0.25)
  })
})

describe("storable text", () => {
  it("replaces NUL and unpaired surrogates with U+FFFD, keeps pairs, copies only when needed", () => {
    expect(toStorableText("a\u0000b\ud800c\udc00d\ud83d\ude00")).toBe("a\ufffdb\ufffdc\ufffdd\ud83d\ude00")
    const clean = [{ text: "fine 😀", nested: { k: ["x"] } }]
    expect(toStorable(clean)).toBe(clean)
    expect(toStorable([{ text: "bad \ud800", nested: { "k\u0000": ["\udfff"] } }])).toEqual([{ text: "bad \ufffd", nested: { "k\ufffd": ["\ufffd"] } }])
  })

  it("names the first unstorable string by its path", () => {
    expect(findUnstorable({ a: [1, "ok", { b: "x\u0000" }] })).toEqual({ path: ["a", 2, "b"], inKey: false })
    expect(findUnstorable({ a: { "\ud800": 1 } })).toEqual({ path: ["a", "\ud800"], inKey: true })
    expect(findUnstorable({ a: "😀" })).toBeUndefined()
  })
})
