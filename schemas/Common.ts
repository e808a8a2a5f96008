// Shapes shared by many endpoints: pagination, timestamps, money, bounded integers and dates,
// storable text and JSON objects.
import { BigDecimal, ParseResult, Schema } from "effect"
import { MONEY_MAX_INTEGER_DIGITS, MONEY_MAX_SCALE, moneyFromNumber, parseMoney } from "../layers/lib/Money.js"
import { decodeCursor, encodeCursor, type LedgerPosition } from "../layers/lib/LedgerCursor.js"
import { findUnstorable, isStorableText } from "../layers/lib/StorableText.js"

/** The most pages a list walks (its offset stays far inside Postgres' bigint). */
export const MAX_PAGE = 10_000_000

/** Query `page` (1-MAX_PAGE, default 1) and `limit` (1-100, default 20) of every paginated list. */
export const PageParam = Schema.optionalWith(
  Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, MAX_PAGE)),
  { default: () => 1 }
)
export const LimitParam = Schema.optionalWith(
  Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100)),
  { default: () => 20 }
)
export const Pagination = Schema.Struct({ page: PageParam, limit: LimitParam })

/** `{ data, total, page, limit }`, the spec's paginated list body. */
export const Paginated = <A, I, R>(item: Schema.Schema<A, I, R>) =>
  Schema.Struct({ data: Schema.Array(item), total: Schema.Int, page: Schema.Int, limit: Schema.Int })

/** Timestamps travel as ISO 8601 strings and are Dates in code. */
export const Timestamp = Schema.Date
export const NullableTimestamp = Schema.NullOr(Schema.Date)

/**
 * The dates a client may send (`since`, `expires_at`...): years 1 to 9999, what ISO 8601 spells
 * with four digits and Postgres' timestamptz holds; a JS Date reaches year 275760 either way.
 */
export const DATE_MIN = new Date("0001-01-01T00:00:00.000Z").getTime()
export const DATE_MAX = Date.UTC(9999, 11, 31, 23, 59, 59, 999)
export const DateInput = Schema.Date.pipe(Schema.filter((d) => d.getTime() >= DATE_MIN && d.getTime() <= DATE_MAX, {
  message: () => "must be a date between 0001-01-01 and 9999-12-31"
}))

/** The range of a Postgres `integer` column. */
export const INT4_MIN = -2147483648
export const INT4_MAX = 2147483647
export const Int4 = Schema.Int.pipe(Schema.between(INT4_MIN, INT4_MAX))

const unstorableMessage = "must not contain NUL characters or unpaired UTF-16 surrogates"

/** Text Postgres can store (the body check already refuses the rest; this guards other sources). */
export const Text = Schema.String.pipe(Schema.filter(isStorableText, { message: () => unstorableMessage }))

/** Arbitrary caller JSON object (metadata). */
export const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown }).pipe(
  Schema.filter((o) => {
    const found = findUnstorable(o)
    return found === undefined ? undefined : { path: found.path, message: unstorableMessage }
  })
)

/**
 * A money amount a client sends (USD or display units): a JSON number or a decimal string,
 * decoded exactly from its text. The body check hands a literal a float64 cannot hold on as a
 * string, so `123456789.0000000001` arrives whole either way. At most MONEY_MAX_SCALE decimal
 * places and below 10^MONEY_MAX_INTEGER_DIGITS (layers/lib/Money.ts); encoded as an exact decimal
 * string (idempotency hashes compare amounts exactly).
 */
export const Money = Schema.transformOrFail(Schema.Union(Schema.Number, Schema.String), Schema.BigDecimalFromSelf, {
  strict: true,
  decode: (value, _, ast) => {
    const amount = typeof value === "number" ? moneyFromNumber(value) : parseMoney(value)
    return typeof amount === "string" ? ParseResult.fail(new ParseResult.Type(ast, value, amount)) : ParseResult.succeed(amount)
  },
  encode: (amount) => ParseResult.succeed(BigDecimal.format(BigDecimal.normalize(amount)))
}).annotations({
  identifier: "Money",
  description: `A decimal amount: a JSON number or a string such as "12.50"; at most ${MONEY_MAX_SCALE} decimal places, below 10^${MONEY_MAX_INTEGER_DIGITS}`
})
export const PositiveMoney = Money.pipe(Schema.positiveBigDecimal())
export const NonNegativeMoney = Money.pipe(Schema.nonNegativeBigDecimal())

/**
 * A money amount kept as a JS number (platform settings, display rules), within the same bounds:
 * the body check guarantees the number is the literal the client sent.
 */
export const MoneyNumber = Schema.Number.pipe(Schema.filter((n) => {
  const amount = moneyFromNumber(n)
  return typeof amount === "string" ? amount : undefined
}))

/** USD amounts in answers: JSON numbers on the wire, exact BigDecimal in code. */
export const Usd = Schema.BigDecimalFromNumber

/** `Idempotency-Key` on every endpoint that moves money (layers/platform/Idempotency.ts). */
export const IdempotencyHeaders = Schema.Struct({
  "idempotency-key": Schema.optional(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(255)))
})

/** Reject unknown fields instead of silently dropping them. */
export const strict = { parseOptions: { onExcessProperty: "error" } } as const

/** Path ids are plain strings: a malformed id is simply "not found". */
export const PathId = Schema.String

/** Query `after`: a ledger cursor (a row's `cursor`, or a list's `next_cursor`), opaque to clients. */
export const LedgerCursor = Schema.transformOrFail(
  Schema.String,
  Schema.Struct({ xid: Schema.String, seq: Schema.String }),
  {
    strict: true,
    decode: (text, _, ast) => {
      const position = decodeCursor(text)
      return position === undefined
        ? ParseResult.fail(new ParseResult.Type(ast, text, "must be a cursor returned by this list (next_cursor or a row's cursor)"))
        : ParseResult.succeed(position)
    },
    encode: (position: LedgerPosition) => ParseResult.succeed(encodeCursor(position))
  }
).annotations({
  identifier: "LedgerCursor",
  description: "An opaque position in the list's backfill order: rows strictly after it are returned"
})

/**
 * The query of a ledger listing in backfill order (spec "Budgets", GET /transactions): `since`
 * (rows created strictly after it), `after` (rows strictly after that cursor; the exact resume
 * point), `limit` (1-200, default 50).
 */
export const BackfillParams = Schema.Struct({
  since: Schema.optional(DateInput.annotations({
    description: "Rows created strictly after this time (ISO 8601). A starting point: to continue, pass next_cursor as `after`"
  })),
  after: Schema.optional(LedgerCursor),
  limit: Schema.optionalWith(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 200)), { default: () => 50 })
})

/** A ledger row's own cursor: resuming `after` it returns the rows that follow it. */
export const RowCursor = Schema.String.annotations({ description: "This row's position; pass it as `after` to resume behind it" })

/** `{ data, limit, next_cursor }`: a ledger page in backfill order. */
export const BackfillList = <A, I, R>(item: Schema.Schema<A, I, R>) =>
  Schema.Struct({
    data: Schema.Array(item),
    limit: Schema.Int,
    next_cursor: Schema.NullOr(Schema.String).annotations({
      description: "Pass as `after` to read the rows that follow this page (null: no row yet and no `after` given)"
    })
  })
