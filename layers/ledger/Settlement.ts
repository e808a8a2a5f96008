// What a served call's settlement is: its log row, what it debits and whom. Settlements queues
// and writes them; the journal (on disk) and call records (in Postgres) keep them as JSON.
import { BigDecimal, Option, type Tracer } from "effect"
import type { PlatformSettings } from "../../schemas/Platforms.js"
import type { Actor } from "./BudgetLedger.js"

type WalletSettings = NonNullable<PlatformSettings["end_user_wallet"]>

/**
 * What the log row says about the call itself; its id, tenant, time and cost come from the
 * settlement, and so does its billing status (`billed`, or `not_billed` at zero cost) unless the
 * call sets one.
 */
export interface CallRecord {
  readonly request_type: string
  readonly provider_id: string
  readonly model_id: string
  readonly model_slug: string
  readonly provider_model_id: string
  readonly prompt_tokens: number
  readonly completion_tokens: number
  readonly total_tokens: number
  readonly latency_ms: number
  readonly status: string
  readonly error_message: string | null
  readonly token_count_method: string
  /**
   * `estimated`: billed on the gateway's own token count because the provider's usage was out
   * of bounds. Written by the transaction (the one statement writes only billed/not_billed).
   */
  readonly billing_status?: "estimated" | undefined
  readonly metadata: Record<string, unknown>
}

/**
 * The end user's live budget as admission saw it: the one-statement settlement writes the call
 * only if the budget is still that one, in that period, and the call ended before the next.
 */
export interface BudgetExpectation {
  readonly id: string
  readonly periodStart: Date
  /** When its next period starts (nextPeriodStart); null: never (one_time). */
  readonly periodEnd: Date | null
}

/** A served call's settlement: its log row, what it debits, and whom. */
export interface Settlement {
  /** The settlement's identity: the id of its log row (a retry applies nothing twice). */
  readonly id: string
  readonly platformId: string
  readonly endUserId: string | null
  /** The call's cost, debited from the end user's budget and the platform wallet (zero: free). */
  readonly costUsd: BigDecimal.BigDecimal
  /** When the call was served: the rows carry this time. */
  readonly at: Date
  readonly log: CallRecord
  /** Metadata of the budget and wallet ledger rows. */
  readonly details: Record<string, unknown>
  readonly actor: Actor
  /** The platform's display-wallet rules, charged on the budget's display ledger. */
  readonly displaySettings: WalletSettings | null
  /** The call's settlement span: the writes and webhook events join its trace. */
  readonly parent: Option.Option<Tracer.AnySpan>
  /**
   * The end user's live budget at admission (null: none); absent when unknown (a replayed
   * journal, an inactive budget): then the settlement is written by the transaction.
   */
  readonly budget?: BudgetExpectation | null | undefined
  /** The budget reservation admission made (budget_enforcement "reserve"), deleted with the debit. */
  readonly reservationId?: string | undefined
}

/** The settlement as JSON text (the span it joins is not kept, nor the budget admission saw). */
export const settlementJson = (s: Settlement) =>
  JSON.stringify({
    id: s.id,
    platformId: s.platformId,
    endUserId: s.endUserId,
    costUsd: BigDecimal.format(s.costUsd),
    at: s.at.toISOString(),
    log: s.log,
    details: s.details,
    actor: s.actor,
    displaySettings: s.displaySettings,
    reservationId: s.reservationId
  })

/** A settlement from its JSON text; null when the text is not one (a line torn by a crash). */
export const settlementFromJson = (text: string): Settlement | null => {
  try {
    const r = JSON.parse(text)
    const cost = BigDecimal.fromString(r.costUsd)
    if (typeof r.id !== "string" || Option.isNone(cost)) return null
    return {
      id: r.id,
      platformId: r.platformId,
      endUserId: r.endUserId,
      costUsd: cost.value,
      at: new Date(r.at),
      log: r.log,
      details: r.details,
      actor: r.actor,
      displaySettings: r.displaySettings,
      parent: Option.none(),
      reservationId: typeof r.reservationId === "string" ? r.reservationId : undefined
    }
  } catch {
    return null
  }
}
