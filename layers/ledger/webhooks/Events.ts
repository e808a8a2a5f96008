// Budget events: their payload, the v1 envelope, and which of a platform's endpoints want them.
import { BigDecimal } from "effect"
import { API_VERSION, type WebhookEnvelope } from "../../../schemas/Webhooks.js"

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

const money = (x: BigDecimal.BigDecimal): number => Number(BigDecimal.format(BigDecimal.normalize(x)))

/** The envelope exactly as the spec shows it; money as JSON numbers. */
export const buildEnvelope = (eventType: BudgetEventType, data: BudgetEventData, createdAt: Date): WebhookEnvelope => ({
  event_type: eventType,
  event_id: `${data.transaction_id}:${eventType}`,
  api_version: API_VERSION,
  created_at: createdAt.toISOString(),
  data: {
    platform_id: data.platform_id,
    end_user_id: data.end_user_id,
    budget_id: data.budget_id,
    transaction_id: data.transaction_id,
    type: data.type,
    amount_usd: money(data.amount_usd),
    max_usd_after: money(data.max_usd_after),
    used_usd_after: money(data.used_usd_after),
    remaining_usd_after: money(data.remaining_usd_after),
    reason: data.reason,
    metadata: data.metadata
  }
})

/**
 * Whether some endpoint wants an event type, from the `event_types` of a platform's active
 * endpoints: a list, or null for every type except the opt-in, high-volume budget.debited.
 */
export const wantedBy = (endpointTypes: ReadonlyArray<ReadonlyArray<string> | null>) => (type: BudgetEventType): boolean =>
  endpointTypes.some((types) => types === null ? type !== "budget.debited" : types.includes(type))
