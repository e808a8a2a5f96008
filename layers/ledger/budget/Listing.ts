// The platform's budget list: live budgets, filtered, one page at a time.
import type { PgClient } from "@effect/sql-pg"
import { Effect } from "effect"
import { isUuid } from "../../lib/Ids.js"
import { offsetOf, paginate } from "../../lib/Pagination.js"
import { type BudgetRow, toBudget } from "./Rows.js"

export const list = (
  sql: PgClient.PgClient,
  platformId: string,
  params: {
    readonly end_user_id?: string | undefined
    readonly is_active?: boolean | undefined
    readonly is_suspended?: boolean | undefined
    readonly page: number
    readonly limit: number
  }
) => {
  const filters = [
    sql`platform_id = ${platformId}`,
    sql`deleted_at IS NULL`,
    ...(params.end_user_id === undefined
      ? []
      : [isUuid(params.end_user_id) ? sql`end_user_id = ${params.end_user_id}` : sql`false`]),
    ...(params.is_active === undefined ? [] : [sql`is_active = ${params.is_active}`]),
    ...(params.is_suspended === undefined ? [] : [sql`is_suspended = ${params.is_suspended}`])
  ]
  const where = sql.and(filters)
  return paginate(
    params,
    sql<{ total: number }>`SELECT count(*)::int AS total FROM budgets WHERE ${where}`,
    sql<BudgetRow>`SELECT * FROM budgets WHERE ${where} ORDER BY created_at, id
      LIMIT ${params.limit} OFFSET ${offsetOf(params.page, params.limit)}`.pipe(Effect.map((rows) => rows.map(toBudget)))
  ).pipe(Effect.orDie)
}
