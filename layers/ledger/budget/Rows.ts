// The budget and ledger row shapes as stored, their API views, and who caused a change.
import { BigDecimal } from "effect"
import type { Budget, BudgetPeriod, BudgetTransaction } from "../../../schemas/Budgets.js"
import { NotFound } from "../../../schemas/Errors.js"
import { dec } from "../../lib/Money.js"
import type { Principal } from "../../access/KeyAuth.js"

export interface BudgetRow {
  readonly id: string
  readonly platform_id: string
  readonly end_user_id: string
  readonly max_usd: string
  readonly used_usd: string
  readonly period: BudgetPeriod
  readonly period_start: Date
  readonly period_anchor: Date
  readonly auto_replenish: boolean
  readonly replenish_amount: string | null
  readonly low_balance_threshold: string | null
  readonly low_balance_armed: boolean
  readonly is_active: boolean
  readonly is_suspended: boolean
  readonly max_display: string | null
  readonly used_display: string
  readonly created_at: Date
  readonly updated_at: Date
}
export interface TransactionRow {
  readonly id: string
  readonly budget_id: string
  readonly type: BudgetTransaction["type"]
  readonly amount_usd: string
  readonly max_usd_before: string
  readonly max_usd_after: string
  readonly used_usd_before: string
  readonly used_usd_after: string
  readonly reason: string | null
  readonly metadata: Record<string, unknown>
  readonly actor_type: BudgetTransaction["actor_type"]
  readonly actor_key_id: string | null
  readonly created_at: Date
}

export const toBudget = (row: BudgetRow): Budget => {
  const max = dec(row.max_usd)
  const used = dec(row.used_usd)
  return {
    id: row.id,
    platform_id: row.platform_id,
    end_user_id: row.end_user_id,
    max_usd: max,
    used_usd: used,
    remaining_usd: BigDecimal.subtract(max, used),
    period: row.period,
    period_start: row.period_start,
    auto_replenish: row.auto_replenish,
    replenish_amount: row.replenish_amount === null ? null : dec(row.replenish_amount),
    low_balance_threshold: row.low_balance_threshold === null ? null : dec(row.low_balance_threshold),
    is_active: row.is_active,
    is_suspended: row.is_suspended,
    created_at: row.created_at,
    updated_at: row.updated_at
  }
}

export const toTransaction = (row: TransactionRow): BudgetTransaction => ({
  id: row.id,
  budget_id: row.budget_id,
  type: row.type,
  amount_usd: dec(row.amount_usd),
  max_usd_before: dec(row.max_usd_before),
  max_usd_after: dec(row.max_usd_after),
  used_usd_before: dec(row.used_usd_before),
  used_usd_after: dec(row.used_usd_after),
  reason: row.reason,
  metadata: row.metadata,
  actor_type: row.actor_type,
  actor_key_id: row.actor_key_id,
  created_at: row.created_at
})

/** Who caused a ledger row: the calling key, or the system (resets). */
export interface Actor {
  readonly type: "platform_key" | "end_user_key" | "system"
  readonly keyId: string | null
}

export const SYSTEM: Actor = { type: "system", keyId: null }

export const actorOf = (principal: Principal): Actor =>
  principal._tag === "PlatformKey"
    ? { type: "platform_key", keyId: principal.keyId }
    : principal._tag === "EndUserKey"
    ? { type: "end_user_key", keyId: principal.keyId }
    : SYSTEM

export interface NewBudget {
  readonly platformId: string
  readonly endUserId: string
  readonly maxUsd: BigDecimal.BigDecimal
  readonly period: BudgetPeriod
  readonly autoReplenish?: boolean | undefined
  readonly replenishAmount?: BigDecimal.BigDecimal | undefined
  readonly lowBalanceThreshold?: BigDecimal.BigDecimal | undefined
  readonly reason?: string | undefined
  readonly metadata?: Record<string, unknown> | undefined
}

/** A mutation's outcome: the budget after it and the ledger row it wrote. */
export interface LedgerChange {
  readonly budget: BudgetRow
  readonly transaction: TransactionRow
}

export const noBudget = new NotFound({ code: "not_found", message: "This end user has no budget" })
export const noEndUser = new NotFound({ code: "not_found", message: "No such end user" })

export const remaining = (row: { readonly max_usd: string; readonly used_usd: string }) =>
  BigDecimal.subtract(dec(row.max_usd), dec(row.used_usd))
