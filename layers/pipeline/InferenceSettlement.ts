// What a served model call comes to: what admission fixed (Admitted), how the call ended
// (Outcome), the usage it is billed on (the provider's when believable, else the gateway's
// count), its cost, and the settlement Inference queues, with the call's metrics and span
// attributes.
import { BigDecimal, Effect, type Option, type Tracer } from "effect"
import type { ChatRequest, Usage } from "../../schemas/Chat.js"
import type { PlatformSettings } from "../../schemas/Platforms.js"
import { annotateCurrentSpan, currentSpan } from "../lib/CurrentSpan.js"
import type { HttpExchange } from "../lib/RequestIds.js"
import { perMillion } from "../lib/Money.js"
import { nextPeriodStart } from "../lib/Periods.js"
import { actorOf, type BudgetRow } from "../ledger/BudgetLedger.js"
import type { BudgetExpectation, Settlement } from "../ledger/Settlement.js"
import { costUsd, inferenceDuration, inferenceRequests, taggedBy, tokensUsed } from "../platform/Metrics.js"
import type { RateLimits, RateLimitState } from "./RateLimiter.js"
import { type Caller, operationOf, type RequestType } from "./Preflight.js"
import type { Candidate } from "./ProviderRouter.js"

type WalletSettings = NonNullable<PlatformSettings["end_user_wallet"]>

/**
 * Reported usage is believed only when each count (prompt, completion, total) is a whole number
 * from 0 to this: no call comes near ten million tokens, and a count past it (or negative, or
 * fractional) is a provider's bug or a hostile upstream. A total that differs from prompt +
 * completion is kept (providers count cached and reasoning tokens their own way).
 */
export const MAX_REPORTED_TOKENS = 10_000_000
const believable = (count: number) => Number.isSafeInteger(count) && count >= 0 && count <= MAX_REPORTED_TOKENS
export const usageInBounds = (usage: Usage): boolean =>
  believable(usage.prompt_tokens) && believable(usage.completion_tokens) && believable(usage.total_tokens)
export const UNTRUSTED_USAGE = "reported usage out of bounds; billed on the gateway's token count"

/** Everything settlement needs, fixed at admission. */
export interface Admitted {
  readonly requestId: string
  /** The log row's request_type: `chat.completion`, `response` or `embedding`. */
  readonly requestType: RequestType
  readonly caller: Caller
  readonly request: ChatRequest
  readonly candidates: ReadonlyArray<Candidate>
  readonly promptEstimate: number
  readonly limits: RateLimits
  readonly rateLimit: RateLimitState | null
  /** The platform's display-wallet settings, for the rules applied at settlement. */
  readonly displaySettings: WalletSettings | null
  /** The end user's live budget as admission saw it (null: none; absent: not known). */
  readonly budget: BudgetExpectation | null | undefined
  /** The call's budget reservation (budget_enforcement "reserve"); its settlement releases it. */
  readonly reservationId?: string | undefined
  readonly startedAt: number
  /** The HTTP request that made the call (its x-request-id, its Server-Timing); null outside one. */
  readonly exchange: HttpExchange | null
}

export const budgetExpectation = (row: BudgetRow): BudgetExpectation => ({
  id: row.id,
  periodStart: row.period_start,
  periodEnd: nextPeriodStart(row.period, row.period_anchor, row.period_start)
})

export interface Outcome {
  readonly candidate: Candidate
  readonly usage: Usage
  readonly method: "reported" | "estimated"
  readonly status: "success" | "interrupted" | "error"
  readonly errorMessage: string | null
  /** Streams: milliseconds from admission to the first content. */
  readonly timeToFirstTokenMs?: number | undefined
  /**
   * The provider's usage when it was out of bounds (usageInBounds): then `usage` is the
   * gateway's count, and the log row keeps this in its metadata (`reported_usage`).
   */
  readonly reportedUsage?: Usage | undefined
}

const ZERO = BigDecimal.make(0n, 0)

export const costOf = (candidate: Candidate, usage: Usage) =>
  BigDecimal.sum(perMillion(usage.prompt_tokens, candidate.inputUsdPerMtok), perMillion(usage.completion_tokens, candidate.outputUsdPerMtok))

/** The gateway's own count of a call: the admission's prompt estimate and the emitted text's tokens. */
export const estimatedUsage = (admitted: Admitted, completion: number): Usage => ({
  prompt_tokens: admitted.promptEstimate,
  completion_tokens: completion,
  total_tokens: admitted.promptEstimate + completion
})

const requestsBy = taggedBy(inferenceRequests, "operation", "status")
const durationBy = taggedBy(inferenceDuration, "operation")
const tokensBy = taggedBy(tokensUsed, "gen_ai.token.type", "gen_ai.request.model")
const costBy = taggedBy(costUsd, "gen_ai.request.model")

/**
 * The call's metrics, updated in one step (hot-path rule "metrics pre-keyed, updated in one
 * step"): five Metric effects run by Effect.all cost runtime operations on every call. No fiber-level metric tags are used
 * anywhere (Effect.tagMetrics), so updating without them is what Metric.update would do.
 */
export const recordMetrics = (admitted: Admitted, outcome: Outcome, cost: BigDecimal.BigDecimal, durationMs: number) => {
  const operation = operationOf(admitted.requestType)
  const model = admitted.request.model
  requestsBy(operation, outcome.status).unsafeUpdate(1, [])
  durationBy(operation).unsafeUpdate(durationMs, [])
  tokensBy("input", model).unsafeUpdate(outcome.usage.prompt_tokens, [])
  tokensBy("output", model).unsafeUpdate(outcome.usage.completion_tokens, [])
  costBy(model).unsafeUpdate(BigDecimal.unsafeToNumber(cost), [])
}

/** The settled call on its span: GenAI attributes, and the first content as an event (streams). */
export const annotateSettlement = (admitted: Admitted, outcome: Outcome, cost: BigDecimal.BigDecimal) =>
  Effect.zipRight(
    annotateCurrentSpan({
      "gen_ai.operation.name": operationOf(admitted.requestType),
      "gen_ai.request.model": admitted.request.model,
      "gen_ai.response.model": outcome.candidate.providerModelId,
      "gen_ai.provider.name": outcome.candidate.providerSlug,
      "gen_ai.usage.input_tokens": outcome.usage.prompt_tokens,
      "gen_ai.usage.output_tokens": outcome.usage.completion_tokens,
      "gateway.cost_usd": BigDecimal.format(cost),
      "gateway.token_count_method": outcome.method,
      ...(outcome.timeToFirstTokenMs === undefined ? {} : { "gen_ai.server.time_to_first_token_ms": outcome.timeToFirstTokenMs }),
      "platform.id": admitted.caller.platformId,
      ...(admitted.caller._tag === "EndUserKey" ? { "end_user.id": admitted.caller.endUserId } : {})
    }),
    currentSpan.pipe(Effect.map((span) => {
      if (span._tag === "None" || outcome.timeToFirstTokenMs === undefined) return span
      const at = BigInt(admitted.startedAt + outcome.timeToFirstTokenMs) * 1_000_000n
      span.value.event("gen_ai.first_token", at, { "gen_ai.server.time_to_first_token_ms": outcome.timeToFirstTokenMs })
      return span
    }))
  )

/**
 * The call's settlement: its log row, its budget and wallet debits, and whom. `id` is its
 * identity: a retry after an unacknowledged COMMIT finds the log row and applies nothing twice.
 */
export const settlementOf = (
  id: string,
  admitted: Admitted,
  outcome: Outcome,
  cost: BigDecimal.BigDecimal,
  now: Date,
  parent: Option.Option<Tracer.AnySpan>
): Settlement => {
  const caller = admitted.caller
  return {
    id,
    platformId: caller.platformId,
    endUserId: caller._tag === "EndUserKey" ? caller.endUserId : null,
    costUsd: cost,
    at: now,
    log: {
      request_type: admitted.requestType,
      provider_id: outcome.candidate.providerId,
      model_id: outcome.candidate.modelId,
      model_slug: admitted.request.model,
      provider_model_id: outcome.candidate.providerModelId,
      prompt_tokens: outcome.usage.prompt_tokens,
      completion_tokens: outcome.usage.completion_tokens,
      total_tokens: outcome.usage.total_tokens,
      latency_ms: Math.max(0, now.getTime() - admitted.startedAt),
      status: outcome.status,
      error_message: outcome.errorMessage,
      token_count_method: outcome.method,
      billing_status: outcome.reportedUsage !== undefined && BigDecimal.greaterThan(cost, ZERO) ? "estimated" : undefined,
      // x_request_id: the HTTP request's id (absent outside one), what a client quotes to support.
      metadata: outcome.reportedUsage === undefined
        ? { request_id: admitted.requestId, x_request_id: admitted.exchange?.id, stream: admitted.request.stream === true }
        : { request_id: admitted.requestId, x_request_id: admitted.exchange?.id, stream: admitted.request.stream === true, reported_usage: outcome.reportedUsage }
    },
    details: {
      log_id: id,
      request_id: admitted.requestId,
      model: admitted.request.model,
      provider: outcome.candidate.providerSlug,
      provider_model_id: outcome.candidate.providerModelId,
      prompt_tokens: outcome.usage.prompt_tokens,
      completion_tokens: outcome.usage.completion_tokens,
      token_count_method: outcome.method
    },
    actor: actorOf(caller),
    displaySettings: admitted.displaySettings,
    parent,
    budget: admitted.budget,
    reservationId: admitted.reservationId
  }
}
