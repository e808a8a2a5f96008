// Display wallet (product units) wire shapes: the platform-side wallet view and operations, and
// the end user's /v1/me/budget.
import { Schema } from "effect"
import { BackfillList, JsonObject, Money, NonNegativeMoney, PositiveMoney, RowCursor, Text, Timestamp } from "./Common.js"

/** Display amounts in answers (JSON numbers); requests take Money, exact and bounded. */
const Amount = Schema.BigDecimalFromNumber
const strict = { parseOptions: { onExcessProperty: "error" } } as const

export const WalletView = Schema.Struct({
  end_user_id: Schema.String,
  budget_id: Schema.String,
  usd_ledger: Schema.Struct({
    max_usd: Amount,
    used_usd: Amount,
    remaining_usd: Amount,
    /** Held by calls in flight (budget_enforcement "reserve"); counted in remaining_usd. */
    reserved_usd: Schema.optional(Amount),
    is_active: Schema.Boolean,
    is_suspended: Schema.Boolean
  }),
  display_ledger: Schema.NullOr(Schema.Struct({
    unit: Schema.String,
    max: Amount,
    used: Amount,
    remaining: Amount,
    active_rules: Schema.Array(Schema.Struct({ trigger: Schema.String, amount: Schema.Number }))
  }))
})
export type WalletView = typeof WalletView.Type

export const InitWallet = Schema.Struct({
  max_display: NonNegativeMoney,
  reason: Schema.optional(Text.pipe(Schema.maxLength(500)))
}).annotations(strict)
export type InitWallet = typeof InitWallet.Type

export const InitWalletResult = Schema.Struct({
  budget_id: Schema.String,
  max_display: Amount,
  used_display: Amount,
  idempotent_replay: Schema.Boolean,
  no_changes: Schema.Boolean
})
export type InitWalletResult = typeof InitWalletResult.Type

export const WalletTopupBody = Schema.Struct({
  amount_display: PositiveMoney,
  reason: Schema.optional(Text.pipe(Schema.maxLength(500)))
}).annotations(strict)
export type WalletTopupBody = typeof WalletTopupBody.Type

export const WalletTopupResult = Schema.Struct({
  budget_id: Schema.String,
  max_display: Amount,
  used_display: Amount,
  amount_display: Amount,
  idempotent_replay: Schema.Boolean
})
export type WalletTopupResult = typeof WalletTopupResult.Type

export const AdjustWallet = Schema.Struct({
  delta: Money,
  reason: Text.pipe(
    Schema.maxLength(500),
    Schema.filter((r) => r.trim().length > 0, { message: () => "reason must not be empty or whitespace" })
  )
}).annotations(strict)
export type AdjustWallet = typeof AdjustWallet.Type

export const AdjustWalletResult = Schema.Struct({
  budget_id: Schema.String,
  max_display: Amount,
  used_display: Amount,
  requested_delta: Amount,
  applied_delta: Amount,
  clamped: Schema.Boolean,
  idempotent_replay: Schema.Boolean
})
export type AdjustWalletResult = typeof AdjustWalletResult.Type

/** GET /v1/me/budget: display units only (or the legacy USD shape, unit `USD`). */
export const MyBudget = Schema.Struct({
  unit: Schema.String,
  max: Amount,
  used: Amount,
  remaining: Amount,
  period: Schema.String,
  period_start: Timestamp
})
export type MyBudget = typeof MyBudget.Type

/**
 * A display-ledger audit row: `opening` (initialised), `topup` (max_display raised, or moved by
 * an overwrite), `adjustment` (POST /adjust, and the `wallet_disabled` row of DELETE, after which
 * max_display is null).
 */
export const DisplayTransaction = Schema.Struct({
  id: Schema.String,
  budget_id: Schema.String,
  type: Schema.Literal("opening", "topup", "adjustment"),
  amount_display: Amount,
  max_display_before: Schema.NullOr(Amount),
  max_display_after: Schema.NullOr(Amount),
  used_display_before: Amount,
  used_display_after: Amount,
  reason: Schema.NullOr(Schema.String),
  metadata: JsonObject,
  actor_type: Schema.Literal("platform_key", "end_user_key", "system"),
  actor_key_id: Schema.NullOr(Schema.String),
  created_at: Timestamp,
  cursor: RowCursor
})
export type DisplayTransaction = typeof DisplayTransaction.Type
export const DisplayTransactions = BackfillList(DisplayTransaction)
