// Usage reports: calls, errors, tokens and charged cost over a time range, grouped by time or by
// a dimension, read from the rollups of the inference log (migrations/0026_usage_rollup.ts) for
// the whole hours (or days) of the range and from the log itself for the partial ones at its
// edges, so any range is exact and a report reads few raw rows.
import type { Fragment } from "@effect/sql/Statement"
import { PgClient } from "@effect/sql-pg"
import { BigDecimal, Clock, Effect } from "effect"
import { ValidationError } from "../../schemas/Errors.js"
import type { AdminUsageGroupBy, UsageBucket, UsageReport, UsageTotals } from "../../schemas/Usage.js"
import { isUuid } from "../lib/Ids.js"
import { dec, sqlDec } from "../lib/Money.js"

const HOUR_MS = 3_600_000
const DAY_MS = 24 * HOUR_MS
/** The range when none is given: the 30 days up to now. */
export const DEFAULT_RANGE_DAYS = 30
/** The longest range: a year of day buckets (a leap year's); hour buckets: a month (744 buckets). */
export const MAX_RANGE_DAYS = 366
export const MAX_HOUR_RANGE_DAYS = 31

export interface UsageQuery {
  readonly from?: Date | undefined
  readonly to?: Date | undefined
  readonly group_by: AdminUsageGroupBy
  readonly end_user_id?: string | undefined
  readonly model?: string | undefined
  readonly limit: number
}

const invalid = (param: string, message: string) => new ValidationError({ code: "validation_error", param, message })

/** The range a query asks for, with its defaults, or why it is refused. */
export const resolveRange = (query: UsageQuery, now: Date): Effect.Effect<{ readonly from: Date; readonly to: Date }, ValidationError> => {
  const to = query.to ?? now
  const from = query.from ?? new Date(to.getTime() - DEFAULT_RANGE_DAYS * DAY_MS)
  if (from.getTime() >= to.getTime()) return Effect.fail(invalid("from", "from must be before to"))
  const maxDays = query.group_by === "hour" ? MAX_HOUR_RANGE_DAYS : MAX_RANGE_DAYS
  if (to.getTime() - from.getTime() > maxDays * DAY_MS) {
    return Effect.fail(invalid(query.from === undefined ? "to" : "from",
      `the range may span at most ${maxDays} days${query.group_by === "hour" ? " with group_by=hour" : ""}`))
  }
  return Effect.succeed({ from, to })
}

const floorTo = (ms: number, step: number) => Math.floor(ms / step) * step
const ceilTo = (ms: number, step: number) => Math.ceil(ms / step) * step

/**
 * The range's whole units of `grain` (read from a rollup) and its partial units at either edge
 * (read from the log); within one unit, all of it is an edge.
 */
export const splitRange = (from: Date, to: Date, grain: number) => {
  const wholeFrom = ceilTo(from.getTime(), grain)
  const wholeTo = floorTo(to.getTime(), grain)
  if (wholeFrom >= wholeTo) return { whole: null, edges: [[from, to]] as const }
  const edges: Array<readonly [Date, Date]> = []
  if (from.getTime() < wholeFrom) edges.push([from, new Date(wholeFrom)])
  if (wholeTo < to.getTime()) edges.push([new Date(wholeTo), to])
  return { whole: [new Date(wholeFrom), new Date(wholeTo)] as const, edges }
}

/**
 * Where a report reads its whole units: the hourly rollup (no end user in it, so it stays small),
 * the daily rollup by end user when the report is by or of end users, and the log alone for hour
 * buckets of end users (a month at most).
 */
export type Source =
  | { readonly table: "usage_hourly" | "usage_daily_users"; readonly grain: number }
  | { readonly table: null }

export const sourceOf = (query: UsageQuery): Source =>
  query.group_by !== "end_user" && query.end_user_id === undefined
    ? { table: "usage_hourly", grain: HOUR_MS }
    : query.group_by === "hour"
    ? { table: null }
    : { table: "usage_daily_users", grain: DAY_MS }

/** The start of every bucket of a time grouping that overlaps the range (empty buckets are answered with zeros). */
export const bucketStarts = (from: Date, to: Date, step: "day" | "hour"): ReadonlyArray<number> => {
  const size = step === "day" ? DAY_MS : HOUR_MS
  const starts: Array<number> = []
  for (let at = floorTo(from.getTime(), size); at < to.getTime(); at += size) starts.push(at)
  return starts
}

const isTime = (groupBy: AdminUsageGroupBy): groupBy is "day" | "hour" => groupBy === "day" || groupBy === "hour"

/** Each grouping's key over the cells `c`; a closed set, so the text is never a client's. */
const KEY_EXPRESSION: Record<AdminUsageGroupBy, string> = {
  day: "date_trunc('day', c.hour AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'",
  hour: "c.hour",
  model: "c.model_slug",
  end_user: "c.end_user_id",
  provider: "c.provider_id",
  platform: "c.platform_id"
}

/** The key as the answer shows it, from the grouped row `g` (time keys as epoch milliseconds). */
const KEY_TEXT: Record<AdminUsageGroupBy, string> = {
  day: "(extract(epoch FROM g.k) * 1000)::bigint::text",
  hour: "(extract(epoch FROM g.k) * 1000)::bigint::text",
  model: "g.k",
  end_user: "g.k::text",
  provider: "coalesce(p.slug, g.k::text)",
  platform: "g.k::text"
}

interface Row {
  readonly total: boolean
  readonly ord: string
  readonly key: string | null
  readonly external_id: string | null
  readonly calls: string
  readonly errors: string
  readonly input_tokens: string
  readonly output_tokens: string
  readonly cost_usd: string
}

const ZERO_COUNTS: UsageTotals = { calls: 0, errors: 0, input_tokens: 0, output_tokens: 0, cost_usd: "0" }

const countsOf = (row: Row): UsageTotals => ({
  calls: Number(row.calls),
  errors: Number(row.errors),
  input_tokens: Number(row.input_tokens),
  output_tokens: Number(row.output_tokens),
  cost_usd: sqlDec(dec(row.cost_usd))
})

/** Which platforms a report counts: conditions on the rollup's rows and on the log's. */
export interface PlatformScope {
  readonly scope: Fragment
  readonly logScope: Fragment
}

/** One platform (not an id: none). */
export const onePlatform = (sql: PgClient.PgClient, platformId: string): PlatformScope => {
  const scope = isUuid(platformId) ? sql`platform_id = ${platformId}` : sql`false`
  return { scope, logScope: scope }
}

/** Every platform; the log's index leads with the platform, so its edges are read one index range per platform. */
export const everyPlatform = (sql: PgClient.PgClient): PlatformScope =>
  ({ scope: sql`true`, logScope: sql`platform_id = ANY(ARRAY(SELECT id FROM platforms))` })

/**
 * The cells of a range: rollup rows of its whole hours or days and raw log rows of its edges, in
 * the same columns (`hour`: the cell's hour, or day), under the same counting rules as the
 * rollups' triggers.
 */
const cells = (sql: PgClient.PgClient, platforms: PlatformScope, from: Date, to: Date, query: UsageQuery) => {
  const filters = [
    ...(query.end_user_id === undefined ? [] : [isUuid(query.end_user_id) ? sql`end_user_id = ${query.end_user_id}` : sql`false`]),
    ...(query.model === undefined ? [] : [sql`model_slug = ${query.model}`])
  ]
  const source = sourceOf(query)
  const { whole, edges } = source.table === null ? { whole: null, edges: [[from, to]] as const } : splitRange(from, to, source.grain)
  const parts = []
  if (whole !== null && source.table === "usage_hourly") {
    parts.push(sql`SELECT platform_id, hour, NULL::uuid AS end_user_id, model_slug, provider_id, calls, errors, input_tokens,
        output_tokens, cost_usd
      FROM usage_hourly WHERE ${sql.and([platforms.scope, sql`hour >= ${whole[0]}`, sql`hour < ${whole[1]}`, ...filters])}`)
  }
  if (whole !== null && source.table === "usage_daily_users") {
    parts.push(sql`SELECT platform_id, day AS hour, end_user_id, model_slug, provider_id, calls, errors, input_tokens,
        output_tokens, cost_usd
      FROM usage_daily_users WHERE ${sql.and([platforms.scope, sql`day >= ${whole[0]}`, sql`day < ${whole[1]}`, ...filters])}`)
  }
  if (edges.length > 0) {
    const within = sql.or(edges.map(([a, b]) => sql`(created_at >= ${a} AND created_at < ${b})`))
    parts.push(sql`SELECT platform_id, date_trunc('hour', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour,
        end_user_id, model_slug, provider_id, 1::bigint AS calls,
        CASE WHEN status <> 'success' OR billing_status = 'failed' THEN 1 ELSE 0 END::bigint AS errors,
        prompt_tokens::bigint AS input_tokens, completion_tokens::bigint AS output_tokens,
        CASE WHEN billing_status IN ('billed', 'estimated') THEN estimated_cost_usd ELSE 0 END AS cost_usd
      FROM inference_logs WHERE ${sql.and([platforms.logScope, within, ...filters])}`)
  }
  return parts.reduce((all, part) => sql`${all} UNION ALL ${part}`)
}

/**
 * The report's statement: the buckets (the costliest `limit` + 1 for a dimension, every one for
 * time) and a row of totals (`total`). Exported for bench/usage.ts, which explains it.
 */
export const reportStatement = (sql: PgClient.PgClient, platforms: PlatformScope, from: Date, to: Date, query: UsageQuery) => {
  const groupBy = query.group_by
  const time = isTime(groupBy)
  const labels = groupBy === "provider"
    ? sql`LEFT JOIN providers p ON p.id = g.k`
    : groupBy === "end_user"
    ? sql`LEFT JOIN end_users e ON e.id = g.k`
    : sql.literal("")
  // Dimensions answer the costliest buckets first, at most `limit` (one more tells has_more).
  const limit = time ? sql.literal("") : sql`LIMIT ${query.limit + 1}`
  return sql<Row>`WITH c AS (${cells(sql, platforms, from, to, query)}),
      g AS (SELECT ${sql.literal(KEY_EXPRESSION[groupBy])} AS k, sum(c.calls) AS calls, sum(c.errors) AS errors,
          sum(c.input_tokens) AS input_tokens, sum(c.output_tokens) AS output_tokens, sum(c.cost_usd) AS cost_usd
        FROM c GROUP BY 1),
      ranked AS (SELECT g.*, row_number() OVER (ORDER BY g.cost_usd DESC, g.calls DESC, g.k NULLS LAST) AS ord
        FROM g ORDER BY ord ${limit})
    SELECT false AS total, g.ord::text AS ord, ${sql.literal(KEY_TEXT[groupBy])} AS key,
        ${sql.literal(groupBy === "end_user" ? "e.external_id" : "NULL::text")} AS external_id,
        g.calls::text AS calls, g.errors::text AS errors, g.input_tokens::text AS input_tokens,
        g.output_tokens::text AS output_tokens, g.cost_usd::text AS cost_usd
      FROM ranked g ${labels}
    UNION ALL
    SELECT true, '0', NULL, NULL, coalesce(sum(calls), 0)::text, coalesce(sum(errors), 0)::text,
        coalesce(sum(input_tokens), 0)::text, coalesce(sum(output_tokens), 0)::text, coalesce(sum(cost_usd), 0)::text
      FROM g`
}

export class Usage extends Effect.Service<Usage>()("gateway/Usage", {
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient

    const report = (platforms: PlatformScope, query: UsageQuery): Effect.Effect<UsageReport, ValidationError> =>
      Effect.gen(function*() {
        const { from, to } = yield* resolveRange(query, new Date(yield* Clock.currentTimeMillis))
        const groupBy = query.group_by
        const time = isTime(groupBy)
        const rows = yield* reportStatement(sql, platforms, from, to, query).pipe(Effect.orDie)
        const totals = rows.find((row) => row.total)
        const grouped = rows.filter((row) => !row.total).sort((a, b) => Number(a.ord) - Number(b.ord))
        const bucket = (row: Row): UsageBucket => groupBy === "end_user"
          ? { key: row.key, external_id: row.external_id, ...countsOf(row) }
          : { key: row.key, ...countsOf(row) }
        let data: ReadonlyArray<UsageBucket>
        let hasMore = false
        if (time) {
          const found = new Map(grouped.map((row) => [Number(row.key), row]))
          data = bucketStarts(from, to, groupBy).map((start) => {
            const row = found.get(start)
            return { key: new Date(start).toISOString(), ...(row === undefined ? ZERO_COUNTS : countsOf(row)) }
          })
        } else {
          hasMore = grouped.length > query.limit
          data = grouped.slice(0, query.limit).map(bucket)
        }
        return {
          object: "usage" as const,
          from,
          to,
          group_by: groupBy,
          data,
          totals: totals === undefined ? ZERO_COUNTS : countsOf(totals),
          has_more: hasMore
        }
      }).pipe(Effect.withSpan("Usage.report", { attributes: { "usage.group_by": query.group_by } }))

    /** One platform's usage (its platform key; the caller checked it). */
    const forPlatform = (platformId: string, query: UsageQuery) => report(onePlatform(sql, platformId), query)

    /** Every platform's usage, or one's (`platformId`); the operator's. */
    const forOperator = (platformId: string | undefined, query: UsageQuery) =>
      report(platformId === undefined ? everyPlatform(sql) : onePlatform(sql, platformId), query)

    return { forPlatform, forOperator } as const
  })
}) {}

/** Sums of exact decimal texts (tests and scripts compare reports with ledgers). */
export const sumUsd = (amounts: ReadonlyArray<string>): string =>
  sqlDec(amounts.reduce((sum, amount) => BigDecimal.sum(sum, dec(amount)), BigDecimal.make(0n, 0)))
