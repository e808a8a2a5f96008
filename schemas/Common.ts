// Shapes shared by many endpoints: pagination, timestamps, money and JSON objects.
import { Schema } from "effect"

/** Query `page` (>= 1, default 1) and `limit` (1-100, default 20) of every paginated list. */
export const PageParam = Schema.optionalWith(
  Schema.NumberFromString.pipe(Schema.int(), Schema.greaterThanOrEqualTo(1)),
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

/** Postgres text cannot hold U+0000: refuse it at the edge instead of failing in the database. */
const hasNul = (value: unknown): boolean =>
  typeof value === "string"
    ? value.includes("\u0000")
    : Array.isArray(value)
    ? value.some(hasNul)
    : value !== null && typeof value === "object"
    ? Object.entries(value).some(([k, v]) => k.includes("\u0000") || hasNul(v))
    : false

export const Text = Schema.String.pipe(Schema.filter((s) => !hasNul(s), { message: () => "must not contain NUL characters" }))

/** Arbitrary caller JSON object (metadata). */
export const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown }).pipe(
  Schema.filter((o) => !hasNul(o), { message: () => "must not contain NUL characters" })
)

/** USD amounts: JSON numbers on the wire, exact BigDecimal in code. */
export const Usd = Schema.BigDecimalFromNumber
export const PositiveUsd = Schema.BigDecimalFromNumber.pipe(Schema.positiveBigDecimal())
export const NonNegativeUsd = Schema.BigDecimalFromNumber.pipe(Schema.nonNegativeBigDecimal())

/** Reject unknown fields instead of silently dropping them. */
export const strict = { parseOptions: { onExcessProperty: "error" } } as const

/** Path ids are plain strings: a malformed id is simply "not found". */
export const PathId = Schema.String
