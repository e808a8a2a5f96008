// The lazy period reset: a budget whose period has elapsed starts the new one (used back to
// zero, max replenished when configured, alert re-armed) with a system adjustment row.
import type { PgClient } from "@effect/sql-pg"
import { BigDecimal, Effect } from "effect"
import { dec } from "../../lib/Money.js"
import { currentPeriodStart } from "../../lib/Periods.js"
import { insertTransaction } from "./LedgerSql.js"
import { type BudgetRow, SYSTEM } from "./Rows.js"

export const resetIfDue = (sql: PgClient.PgClient, row: BudgetRow, at: Date) =>
  Effect.gen(function*() {
    const due = currentPeriodStart(row.period, row.period_anchor, at)
    if (due.getTime() <= row.period_start.getTime()) return row
    const newMax = row.auto_replenish && row.replenish_amount !== null ? row.replenish_amount : row.max_usd
    const [after] = yield* sql<BudgetRow>`UPDATE budgets SET used_usd = 0, max_usd = ${newMax},
        period_start = ${due}, low_balance_armed = true, updated_at = ${at}
      WHERE id = ${row.id} RETURNING *`
    yield* insertTransaction(sql, row, after!, {
      type: "adjustment",
      amount: BigDecimal.subtract(dec(after!.max_usd), dec(row.max_usd)),
      reason: "period_reset",
      metadata: {
        period: row.period,
        previous_period_start: row.period_start.toISOString(),
        period_start: due.toISOString(),
        replenished: row.auto_replenish && row.replenish_amount !== null
      },
      actor: SYSTEM,
      at
    })
    return after!
  })
