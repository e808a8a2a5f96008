// Exact decimal money: Postgres `numeric` arrives as a string and is never turned into a float sum;
// amounts a client sends are read from their decimal text and bounded in scale and magnitude.
import { BigDecimal } from "effect"

/** A numeric column value (string) as an exact BigDecimal. */
export const dec = (value: string | number): BigDecimal.BigDecimal =>
  BigDecimal.normalize(BigDecimal.unsafeFromString(String(value)))

/**
 * tokens x price per million tokens, exact: dividing by a million is six more decimal places,
 * not a division (BigDecimal's divides digit by digit, on every call's cost).
 */
export const perMillion = (tokens: number, usdPerMtok: BigDecimal.BigDecimal): BigDecimal.BigDecimal =>
  BigDecimal.make(BigInt(tokens) * usdPerMtok.value, usdPerMtok.scale + 6)

/** The string a numeric parameter is bound with. */
export const sqlDec = (value: BigDecimal.BigDecimal): string => BigDecimal.format(BigDecimal.normalize(value))

/**
 * Most decimal places an amount a client sends may carry. The columns are unconstrained
 * `numeric`, so this is the gateway's own rule: a hundred-millionth of a cent is finer than any
 * price or balance needs, and it keeps every accepted amount printable without an exponent.
 */
export const MONEY_MAX_SCALE = 10
/** Amounts a client sends stay below 10^12 (a trillion USD, or display units). */
export const MONEY_MAX_INTEGER_DIGITS = 12

/**
 * A decimal literal's value as `digits` x 10^`exponent`, `digits` without leading or trailing
 * zeros ("" for zero), so equal values have equal parts whatever their spelling.
 */
export interface DecimalParts {
  readonly negative: boolean
  readonly digits: string
  readonly exponent: number
}

/** The JSON number grammar; decimal strings follow it too. */
const DECIMAL = /^(-)?(0|[1-9]\d*)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/

/** Parts of a literal in the JSON number grammar, or undefined. Linear in its length, no BigInt. */
export const decimalParts = (text: string): DecimalParts | undefined => {
  const match = DECIMAL.exec(text)
  if (match === null) return undefined
  const whole = match[2]!
  const fraction = match[3] ?? ""
  const all = whole + fraction
  let first = 0
  while (first < all.length && all.charCodeAt(first) === 0x30) first++
  let end = all.length
  while (end > first && all.charCodeAt(end - 1) === 0x30) end--
  if (first === end) return { negative: false, digits: "", exponent: 0 }
  // A huge exponent string becomes a huge (or infinite) number: the bounds below still refuse it.
  const exponent = (match[4] === undefined ? 0 : Number(match[4])) - fraction.length + (all.length - end)
  return { negative: match[1] === "-", digits: all.slice(first, end), exponent }
}

/** Why an amount is refused, as the validation message says it. */
export const moneyRefusal = {
  notDecimal: "must be a decimal number: a JSON number or a string such as \"12.50\"",
  scale: `must have at most ${MONEY_MAX_SCALE} decimal places`,
  magnitude: `must be less than 10^${MONEY_MAX_INTEGER_DIGITS} in absolute value`
} as const

/**
 * An amount from its decimal text, exact and within the bounds, or the refusal's message. The
 * bounds are checked on the parts first, so a literal like `1e999999999` never becomes a BigInt.
 */
export const parseMoney = (text: string): BigDecimal.BigDecimal | string => {
  const parts = decimalParts(text)
  if (parts === undefined) return moneyRefusal.notDecimal
  if (parts.digits === "") return BigDecimal.make(0n, 0)
  if (-parts.exponent > MONEY_MAX_SCALE) return moneyRefusal.scale
  if (parts.digits.length + parts.exponent > MONEY_MAX_INTEGER_DIGITS) return moneyRefusal.magnitude
  return BigDecimal.make(BigInt(`${parts.negative ? "-" : ""}${parts.digits}`), -parts.exponent)
}

/** An amount that arrived as a JSON number (one the body check found exact in float64). */
export const moneyFromNumber = (value: number): BigDecimal.BigDecimal | string =>
  Number.isFinite(value) ? parseMoney(String(value)) : moneyRefusal.notDecimal
