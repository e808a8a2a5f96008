// Pure rules of debits: the low-balance crossing, a budget's debits planned in order, and
// the ledger rows and webhook events a plan produces.
import { timeOrderedUuid } from "../../lib/Ids.js"
import { BigDecimal, type Effect } from "effect"
import { dec } from "../../lib/Money.js"
import type { BudgetEventType } from "../WebhookOutbox.js"
import { type Actor, type BudgetRow, remaining } from "./Rows.js"

/** The low-balance alert fires once, on the debit that takes remaining from above the threshold to or below it. */
export const crossesLowBalance = (before: BudgetRow, amount: BigDecimal.BigDecimal): boolean => {
  if (before.low_balance_threshold === null || !before.low_balance_armed) return false
  const threshold = dec(before.low_balance_threshold)
  const remainingBefore = remaining(before)
  return BigDecimal.greaterThan(remainingBefore, threshold) &&
    BigDecimal.lessThanOrEqualTo(BigDecimal.subtract(remainingBefore, amount), threshold)
}

/** One settlement's part of a grouped debit (see debitManyLocked). */
export interface DebitItem {
  readonly amount: BigDecimal.BigDecimal | null
  readonly display: BigDecimal.BigDecimal
  readonly reason: string | null
  readonly metadata: Record<string, unknown>
  readonly actor: Actor
  readonly at: Date
  /** Wraps the item's event writes (the settlement's span, so webhooks join its trace). */
  readonly traced: <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
}

export interface DebitStep {
  readonly before: BudgetRow
  readonly after: BudgetRow
  readonly id: string
  readonly crossed: boolean
  readonly item: DebitItem
}

/** A budget's debits computed in order: each step's before/after, and the increments to apply. */
export interface DebitPlan {
  readonly before: BudgetRow
  readonly final: BudgetRow
  readonly steps: ReadonlyArray<DebitStep>
  /** Increments, as debitLocked writes them (numeric keeps the scale of what was added). */
  readonly usd: string
  readonly display: string
}

export const planDebits = (before: BudgetRow, items: ReadonlyArray<DebitItem>): DebitPlan => {
  const steps: Array<DebitStep> = []
  let row = before
  for (const item of items) {
    const usedDisplay = BigDecimal.format(BigDecimal.sum(dec(row.used_display), item.display))
    if (item.amount === null) {
      row = { ...row, used_display: usedDisplay }
      continue
    }
    const crossed = crossesLowBalance(row, item.amount)
    const after: BudgetRow = {
      ...row,
      used_usd: BigDecimal.format(BigDecimal.sum(dec(row.used_usd), item.amount)),
      used_display: usedDisplay,
      low_balance_armed: row.low_balance_armed && !crossed,
      updated_at: item.at
    }
    steps.push({ before: row, after, id: timeOrderedUuid(), crossed, item })
    row = after
  }
  return {
    before,
    final: row,
    steps,
    usd: BigDecimal.format(BigDecimal.subtract(dec(row.used_usd), dec(before.used_usd))),
    display: BigDecimal.format(BigDecimal.subtract(dec(row.used_display), dec(before.used_display)))
  }
}

/** The ledger rows of plans, numbered in order. */
export const ledgerRowsOf = (plans: ReadonlyArray<DebitPlan>) =>
  plans.flatMap((plan) => plan.steps).map((step, i) => ({
    i,
    id: step.id,
    budget_id: step.before.id,
    platform_id: step.before.platform_id,
    amount: BigDecimal.format(step.item.amount!),
    max_before: step.before.max_usd,
    max_after: step.after.max_usd,
    used_before: step.before.used_usd,
    used_after: step.after.used_usd,
    reason: step.item.reason,
    metadata: step.item.metadata,
    actor_type: step.item.actor.type,
    actor_key_id: step.item.actor.keyId,
    created_at: step.item.at.toISOString()
  }))

/** The webhook events a plan's steps raise, given what the platform's endpoints want. */
export const eventsOf = (plan: DebitPlan, wanted: (type: BudgetEventType) => boolean) =>
  plan.steps.flatMap((step) => [
    ...(step.crossed && wanted("budget.low_balance") ? [{ step, type: "budget.low_balance" as const }] : []),
    ...(wanted("budget.debited") ? [{ step, type: "budget.debited" as const }] : [])
  ])
