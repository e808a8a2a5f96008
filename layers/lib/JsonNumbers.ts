// Which JSON number literals a float64 cannot hold exactly. JSON.parse (Node 20 has no access to
// a literal's source text) would round them, or turn `1e309` into Infinity, before any schema
// sees them; the body check (layers/lib/JsonText.ts) hands such literals on as strings instead.
import { decimalParts } from "./Money.js"

/** Significant digits any decimal may have and still survive a round trip through a float64. */
export const FLOAT64_EXACT_DIGITS = 15
/** The most digits of a float64's shortest decimal form. */
const FLOAT64_MAX_DIGITS = 17
const MIN_NORMAL = 2.2250738585072014e-308
/**
 * The longest literal without an exponent whose magnitude is surely in the normal float range
 * (from 1e-299 to 1e300): longer ones may overflow or underflow whatever their digits.
 */
export const PLAIN_LITERAL_MAX_LENGTH = 300

/**
 * True for a literal in the JSON number grammar whose value a float64 does not hold: rounded,
 * overflowing to Infinity or underflowing. Its value is compared with the float's shortest
 * decimal form, so `0.30000000000000004` (17 digits, a float's own spelling) stays a number while
 * `0.1000000000000000001` does not. A literal outside the grammar: false (the parser refuses it).
 */
export const losesPrecision = (literal: string): boolean => {
  const exact = decimalParts(literal)
  if (exact === undefined) return false
  const value = Number(literal)
  if (!Number.isFinite(value)) return true
  const shortest = String(value)
  if (shortest === literal) return false
  const held = decimalParts(shortest)!
  return held.digits !== exact.digits || held.exponent !== exact.exponent || held.negative !== exact.negative
}

/**
 * `losesPrecision`, answered cheaply from what the scan counted: `significant` digits of the
 * mantissa (without leading and trailing zeros) and whether an exponent follows. Up to 15 digits
 * every decimal is exact unless its magnitude leaves the normal range; beyond 17 none is.
 */
export const mustQuote = (literal: string, significant: number, hasExponent: boolean): boolean => {
  if (significant <= FLOAT64_EXACT_DIGITS) {
    if (!hasExponent && literal.length <= PLAIN_LITERAL_MAX_LENGTH) return false
    const value = Number(literal)
    if (significant === 0 || (Number.isFinite(value) && Math.abs(value) >= MIN_NORMAL)) return false
    return losesPrecision(literal)
  }
  if (significant > FLOAT64_MAX_DIGITS) return decimalParts(literal) !== undefined
  return losesPrecision(literal)
}
