// The USD budget record (one per end user) as the API shows it.
import { Schema } from "effect"
import { Timestamp, Usd } from "./Common.js"

export const BudgetPeriod = Schema.Literal("one_time", "daily", "monthly")
export type BudgetPeriod = typeof BudgetPeriod.Type

export const Budget = Schema.Struct({
  id: Schema.String,
  platform_id: Schema.String,
  end_user_id: Schema.String,
  max_usd: Usd,
  used_usd: Usd,
  remaining_usd: Usd,
  period: BudgetPeriod,
  period_start: Timestamp,
  auto_replenish: Schema.Boolean,
  replenish_amount: Schema.NullOr(Usd),
  low_balance_threshold: Schema.NullOr(Usd),
  is_active: Schema.Boolean,
  is_suspended: Schema.Boolean,
  created_at: Timestamp,
  updated_at: Timestamp
})
export type Budget = typeof Budget.Type
