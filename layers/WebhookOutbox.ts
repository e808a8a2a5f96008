// WebhookOutbox: budget events written as outbox rows inside the ledger transaction, then
// delivered (signed, retried) by a dispatcher. SKELETON: being implemented.
import { BigDecimal, Effect } from "effect"

export type BudgetEventType =
  | "budget.topped_up"
  | "budget.low_balance"
  | "budget.suspended"
  | "budget.unsuspended"
  | "budget.debited"

/** The `data` of the v1 envelope (spec "Webhooks"). */
export interface BudgetEventData {
  readonly platform_id: string
  readonly end_user_id: string
  readonly budget_id: string
  readonly transaction_id: string
  readonly type: string
  readonly amount_usd: BigDecimal.BigDecimal
  readonly max_usd_after: BigDecimal.BigDecimal
  readonly used_usd_after: BigDecimal.BigDecimal
  readonly remaining_usd_after: BigDecimal.BigDecimal
  readonly reason: string | null
  readonly metadata: Record<string, unknown>
}

export class WebhookOutbox extends Effect.Service<WebhookOutbox>()("gateway/WebhookOutbox", {
  effect: Effect.gen(function*() {
    /** Writes the event (and one delivery per subscribed endpoint) in the caller's transaction. */
    const enqueue = (_eventType: BudgetEventType, _data: BudgetEventData, _createdAt: Date): Effect.Effect<void> =>
      Effect.void
    return { enqueue } as const
  })
}) {}
