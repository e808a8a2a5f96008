// The USD budget record (one per end user) as the API shows it.
import { Schema } from "effect"
import { BackfillList, BackfillParams, JsonObject, LimitParam, NonNegativeMoney, PageParam, PositiveMoney, RowCursor, Text, Timestamp, Usd } from "./Common.js"

export const BudgetPeriod = Schema.Literal("one_time", "daily", "monthly")
export type BudgetPeriod = typeof BudgetPeriod.Type

export const Budget = Schema.Struct({
  id: Schema.String,
  platform_id: Schema.String,
  end_user_id: Schema.String,
  max_usd: Usd,
  used_usd: Usd,
  remaining_usd: Usd,
  /** Held by calls in flight (budget_enforcement "reserve"); counted in remaining_usd. Shown by GET. */
  reserved_usd: Schema.optional(Usd),
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

const Reason = Text.pipe(Schema.maxLength(500))
const Metadata = JsonObject

export const CreateBudget = Schema.Struct({
  max_usd: PositiveMoney,
  period: Schema.optionalWith(BudgetPeriod, { default: () => "one_time" as const }),
  auto_replenish: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  replenish_amount: Schema.optional(PositiveMoney),
  low_balance_threshold: Schema.optional(NonNegativeMoney)
}).annotations({ parseOptions: { onExcessProperty: "error" } })
export type CreateBudget = typeof CreateBudget.Type

export const UpdateBudget = Schema.Struct({
  max_usd: Schema.optional(PositiveMoney),
  period: Schema.optional(BudgetPeriod),
  auto_replenish: Schema.optional(Schema.Boolean),
  replenish_amount: Schema.optional(Schema.NullOr(PositiveMoney)),
  low_balance_threshold: Schema.optional(Schema.NullOr(NonNegativeMoney)),
  is_active: Schema.optional(Schema.Boolean),
  is_suspended: Schema.optional(Schema.Boolean),
  reason: Schema.optional(Reason),
  metadata: Schema.optional(Metadata)
}).annotations({ parseOptions: { onExcessProperty: "error" } })
export type UpdateBudget = typeof UpdateBudget.Type

/** Body of /topup and /debit. */
export const LedgerAmount = Schema.Struct({
  amount_usd: PositiveMoney,
  reason: Schema.optional(Reason),
  metadata: Schema.optional(Metadata)
}).annotations({ parseOptions: { onExcessProperty: "error" } })
export type LedgerAmount = typeof LedgerAmount.Type

export const TransactionType = Schema.Literal("opening", "topup", "debit", "adjustment")

/** A ledger row as GET /transactions shows it. */
export const BudgetTransaction = Schema.Struct({
  id: Schema.String,
  budget_id: Schema.String,
  type: TransactionType,
  amount_usd: Usd,
  max_usd_before: Usd,
  max_usd_after: Usd,
  used_usd_before: Usd,
  used_usd_after: Usd,
  reason: Schema.NullOr(Schema.String),
  metadata: Metadata,
  actor_type: Schema.Literal("platform_key", "end_user_key", "system"),
  actor_key_id: Schema.NullOr(Schema.String),
  created_at: Timestamp
})
export type BudgetTransaction = typeof BudgetTransaction.Type

/** Topup and debit response (spec "Budgets"). */
export const LedgerEntryResponse = Schema.Struct({
  success: Schema.Boolean,
  idempotent_replay: Schema.Boolean,
  budget_id: Schema.String,
  max_usd: Usd,
  used_usd: Usd,
  transaction: Schema.Struct({
    id: Schema.String,
    type: TransactionType,
    amount_usd: Usd,
    max_usd_after: Usd,
    used_usd_after: Usd,
    reason: Schema.NullOr(Schema.String),
    metadata: Metadata,
    created_at: Timestamp
  })
})
export type LedgerEntryResponse = typeof LedgerEntryResponse.Type

/** PATCH response: the budget record, plus whether it was an idempotent replay. */
export const BudgetUpdated = Schema.Struct({ ...Budget.fields, idempotent_replay: Schema.Boolean })
export type BudgetUpdated = typeof BudgetUpdated.Type

export const TransactionsParams = BackfillParams
/** A ledger row in a listing: the row plus its cursor. */
export const ListedBudgetTransaction = Schema.Struct({ ...BudgetTransaction.fields, cursor: RowCursor })
export type ListedBudgetTransaction = typeof ListedBudgetTransaction.Type
export const TransactionsList = BackfillList(ListedBudgetTransaction)

const BooleanParam = Schema.transformLiterals(["true", true], ["false", false])
export const ListBudgetsParams = Schema.Struct({
  end_user_id: Schema.optional(Schema.String),
  is_active: Schema.optional(BooleanParam),
  is_suspended: Schema.optional(BooleanParam),
  page: PageParam,
  limit: LimitParam
})
