// One pass over a request body's JSON text before anything parses it: how deep it nests, which
// number literals a float64 cannot hold (handed on as JSON strings, so no schema sees a rounded
// value), and whether a string escapes a character Postgres cannot store. An ordinary body costs
// the scan alone: no copy, no allocation beyond the result.
import { FLOAT64_EXACT_DIGITS, mustQuote, PLAIN_LITERAL_MAX_LENGTH } from "./JsonNumbers.js"

/**
 * Most number literals one body may have that need the exact check (more than 15 significant
 * digits, or an exponent far from zero): each costs a float parse and print, and the inexact ones
 * a copy, so past this a body is refused, which keeps its scan within the cost of parsing it.
 * Real bodies have a handful; this allows dozens of embedding vectors of 17-digit floats.
 */
export const MAX_CHECKED_NUMBERS = 100_000

export interface JsonTextScan {
  /** The text to parse: the body itself, or a copy with each inexact number literal quoted. */
  readonly text: string
  /** A string escapes NUL or an unpaired surrogate (StorableText.findUnstorable says where). */
  readonly unstorableEscape: boolean
}

const BACKSLASH = 0x5c
const QUOTE = 0x22
const LETTER_U = 0x75
const DIGIT_0 = 0x30
const DIGIT_9 = 0x39
const MINUS = 0x2d
const PLUS = 0x2b
const DOT = 0x2e
const LETTER_E = 0x65
const OPEN_BRACE = 0x7b
const OPEN_BRACKET = 0x5b
const CLOSE_BRACE = 0x7d
const CLOSE_BRACKET = 0x5d
/** A mantissa of at most this many characters and an exponent of at most SMALL_EXPONENT stay within 1e-300..1e300. */
const SHORT_MANTISSA = 20
const SMALL_EXPONENT = 280
const EXPONENT_CAP = 100_000

/** The UTF-16 unit of the 4 hex digits at `at`, or -1. */
const hexUnit = (text: string, at: number): number => {
  let unit = 0
  for (let k = at; k < at + 4; k++) {
    const c = text.charCodeAt(k)
    const lower = c | 0x20
    const digit = c >= DIGIT_0 && c <= DIGIT_9 ? c - DIGIT_0 : lower >= 0x61 && lower <= 0x66 ? lower - 0x57 : -1
    if (digit < 0) return -1
    unit = unit * 16 + digit
  }
  return unit
}

const isHigh = (unit: number) => unit >= 0xd800 && unit <= 0xdbff
const isLow = (unit: number) => unit >= 0xdc00 && unit <= 0xdfff

/**
 * Scans `text`: "too_deep" when it nests arrays/objects deeper than `maxDepth`,
 * "too_many_long_numbers" past MAX_CHECKED_NUMBERS. Strings are crossed
 * with `indexOf` from escape to escape (native search; most strings have none), so brackets and
 * digits inside them do not count and `"\""`, `"\\"` end where they should. Malformed text is left
 * for the parser to refuse: only literals in the JSON number grammar are ever quoted, so nothing
 * invalid becomes valid.
 */
export const scanJsonText = (
  text: string,
  maxDepth: number
): JsonTextScan | "too_deep" | "too_many_long_numbers" => {
  const length = text.length
  let depth = 0
  let unstorableEscape = false
  let quoted: Array<number> | undefined
  let checked = 0
  // The next quote and backslash at or after i: searched again only once i has passed them,
  // so all the searches together read the text once.
  let nextQuote = -1
  let nextBackslash = -1
  for (let i = 0; i < length; i++) {
    const c = text.charCodeAt(i)
    if (c === QUOTE) {
      i++
      for (;;) {
        if (nextQuote < i) {
          nextQuote = text.indexOf("\"", i)
          if (nextQuote < 0) nextQuote = length
        }
        if (nextBackslash < i) {
          nextBackslash = text.indexOf("\\", i)
          if (nextBackslash < 0) nextBackslash = length
        }
        if (nextBackslash >= nextQuote) {
          i = nextQuote
          break
        }
        i = nextBackslash
        if (text.charCodeAt(i + 1) !== LETTER_U) {
          i += 2
          if (text.charCodeAt(i) === BACKSLASH) nextBackslash = i
          continue
        }
        // \uXXXX: NUL or a surrogate; a high one paired with the low escape right after it is
        // an ordinary character, and both are skipped. A malformed escape is left to the parser.
        const unit = hexUnit(text, i + 2)
        if (unit < 0) {
          i += 2
          continue
        }
        if (isHigh(unit)) {
          if (text.charCodeAt(i + 6) === BACKSLASH && text.charCodeAt(i + 7) === LETTER_U && isLow(hexUnit(text, i + 8))) i += 6
          else unstorableEscape = true
        } else if (unit === 0 || isLow(unit)) unstorableEscape = true
        i += 6
        if (text.charCodeAt(i) === BACKSLASH) nextBackslash = i // escapes often come in runs
      }
    } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      if (++depth > maxDepth) return "too_deep"
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) depth--
    else if ((c >= DIGIT_0 && c <= DIGIT_9) || c === MINUS) {
      // A number literal: its significant digits (no leading or trailing zeros), where its
      // exponent starts and the exponent's size (capped: only "small or not" matters).
      let significant = 0
      let zeros = 0
      let exponentAt = -1
      let exponent = 0
      let end = i
      for (; end < text.length; end++) {
        const d = text.charCodeAt(end)
        if (d >= DIGIT_0 && d <= DIGIT_9) {
          if (exponentAt >= 0) {
            if (exponent < EXPONENT_CAP) exponent = exponent * 10 + d - DIGIT_0
          } else if (d !== DIGIT_0) {
            significant += zeros + 1
            zeros = 0
          } else if (significant > 0) zeros++
        } else if ((d | 0x20) === LETTER_E) exponentAt = end
        else if (d !== DOT && d !== MINUS && d !== PLUS) break
      }
      // The common literal is surely exact: few digits, magnitude well inside the float range.
      const surelyExact = significant === 0 || (significant <= FLOAT64_EXACT_DIGITS && (exponentAt < 0
        ? end - i <= PLAIN_LITERAL_MAX_LENGTH
        : exponentAt - i <= SHORT_MANTISSA && exponent <= SMALL_EXPONENT))
      if (!surelyExact) {
        if (++checked > MAX_CHECKED_NUMBERS) return "too_many_long_numbers"
        if (mustQuote(text.slice(i, end), significant, exponentAt >= 0)) (quoted ??= []).push(i, end)
      }
      i = end - 1
    }
  }
  if (quoted === undefined) return { text, unstorableEscape }
  const pieces: Array<string> = []
  let from = 0
  for (let k = 0; k < quoted.length; k += 2) {
    pieces.push(text.slice(from, quoted[k]), "\"", text.slice(quoted[k], quoted[k + 1]), "\"")
    from = quoted[k + 1]!
  }
  pieces.push(text.slice(from))
  return { text: pieces.join(""), unstorableEscape }
}
