// Exact decimal money for display and for the few sums the console makes (runway, ranking):
// amounts stay decimal strings as the API wrote them and are added as scaled BigInts, never floats.

/** Digits kept after the point in arithmetic: more than any amount the API writes. */
const SCALE = 18
const ONE = 10n ** BigInt(SCALE)

/** A JSON number literal (`1.5`, `2e-7`, `-0.25`) written as a plain decimal (`0.0000002`). */
export const plainDecimal = (literal: string): string => {
  const match = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(literal.trim())
  if (match === null) return literal
  const [, sign = "", whole = "0", fraction = "", exponentText] = match
  const exponent = exponentText === undefined ? 0 : Number(exponentText)
  let digits = whole + fraction
  let point = whole.length + exponent
  if (point <= 0) {
    digits = "0".repeat(1 - point) + digits
    point = 1
  }
  if (point > digits.length) digits = digits + "0".repeat(point - digits.length)
  const integer = digits.slice(0, point).replace(/^0+(?=\d)/, "")
  const decimals = digits.slice(point).replace(/0+$/, "")
  return `${sign}${integer}${decimals === "" ? "" : `.${decimals}`}`
}

/** A decimal string as an integer count of 10^-SCALE units. */
export const toUnits = (amount: string): bigint => {
  const plain = plainDecimal(amount)
  const negative = plain.startsWith("-")
  const [whole = "0", fraction = ""] = (negative ? plain.slice(1) : plain).split(".")
  const units = BigInt(whole) * ONE + BigInt((fraction + "0".repeat(SCALE)).slice(0, SCALE))
  return negative ? -units : units
}

/** Units back to a plain decimal string (trailing zeros dropped). */
export const fromUnits = (units: bigint): string => {
  const negative = units < 0n
  const abs = negative ? -units : units
  const fraction = (abs % ONE).toString().padStart(SCALE, "0").replace(/0+$/, "")
  return `${negative ? "-" : ""}${abs / ONE}${fraction === "" ? "" : `.${fraction}`}`
}

export const sumDecimals = (amounts: ReadonlyArray<string>): string =>
  fromUnits(amounts.reduce((total, amount) => total + toUnits(amount), 0n))

export const compareDecimals = (a: string, b: string): number => {
  const difference = toUnits(a) - toUnits(b)
  return difference < 0n ? -1 : difference > 0n ? 1 : 0
}

/**
 * USD as the API gave it, never rounded: at least two decimals (`$12.50`), every further
 * digit kept (`$0.000035`), thousands grouped.
 */
export const formatUsd = (amount: string | null | undefined): string => {
  if (amount === null || amount === undefined) return "—"
  const plain = plainDecimal(amount)
  const negative = plain.startsWith("-")
  const [whole = "0", fraction = ""] = (negative ? plain.slice(1) : plain).split(".")
  const grouped = whole.replace(/\B(?=(\d{3})+(?!\d))/g, ",")
  return `${negative ? "-" : ""}$${grouped}.${fraction.padEnd(2, "0")}`
}

/** An amount in a display unit (credits): the exact decimal and the unit. */
export const formatUnits = (amount: string | null | undefined, unit: string): string =>
  amount === null || amount === undefined ? "—" : `${plainDecimal(amount)} ${unit}`

/** used / max as a share from 0 to 1 for a bar (display only). */
export const share = (used: string, max: string): number => {
  const maxUnits = toUnits(max)
  if (maxUnits <= 0n) return 1
  const permille = (toUnits(used) * 1000n) / maxUnits
  return Math.min(1, Math.max(0, Number(permille) / 1000))
}

/**
 * Days the balance lasts at the spend of the last `days` days, to a tenth of a day; null when
 * nothing was spent (no burn, no runway to compute).
 */
export const runwayDays = (balance: string, spent: string, days: number): string | null => {
  const spentUnits = toUnits(spent)
  if (spentUnits <= 0n) return null
  const tenths = (toUnits(balance) * BigInt(days) * 10n) / spentUnits
  if (tenths <= 0n) return "0"
  return `${tenths / 10n}.${tenths % 10n}`
}
