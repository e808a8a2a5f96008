// What a served model call comes to: what admission fixed (Admitted), how the call ended
// (Outcome), the usage it is billed on (the provider's when believable, else the gateway's
// count), its cost, and the settlement Inference queues, with the call's metrics and span
// attributes.
import { BigDecimal, Effect, Metric, MetricKey, MetricLabel, type Option, type Tracer } from "effect"
import type { ChatRequest, Usage } from "../../schemas/Chat.js"
import type { PlatformSettings } from "../../schemas/Platforms.js"
import { currentSpan, listAttribute } from "../lib/CurrentSpan.js"
import type { HttpExchange } from "../lib/RequestIds.js"
import { perMillion } from "../lib/Money.js"
import { nextPeriodStart } from "../lib/Periods.js"
import { actorOf, type BudgetRow } from "../ledger/BudgetLedger.js"
import type { BudgetExpectation, Settlement } from "../ledger/Settlement.js"
import {
  costUsd,
  inferenceDuration,
  inferenceRequests,
  madeOnce,
  requestDuration,
  taggedBy,
  timePerOutputToken,
  timeToFirstToken,
  tokenUsage
} from "../platform/Metrics.js"
import type { RateLimits, RateLimitState } from "./RateLimiter.js"
import type { Caller, RequestType } from "./Preflight.js"
import type { Candidate } from "./ProviderRouter.js"
import { genAiProvider } from "./upstream/Upstream.js"

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
  /** The log row's request_type: `chat.completion`, `response`, `agent`, `embedding` or `messages`. */
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
  /** Why the model stopped, per choice, as the upstream said (non-streaming calls: gathered only with tracing on). */
  readonly finishReasons?: ReadonlyArray<string> | undefined
  /**
   * The provider's usage when it was out of bounds (usageInBounds): then `usage` is the
   * gateway's count, and the log row keeps this in its metadata (`reported_usage`).
   */
  readonly reportedUsage?: Usage | undefined
  /** Prompt tokens the provider read from / wrote to its prompt cache (part of usage.prompt_tokens), priced apart. */
  readonly cache?: CacheUsage | undefined
}

/** Prompt tokens served from (read) and added to (write) a provider's prompt cache (Anthropic's cache usage). */
export interface CacheUsage {
  readonly read: number
  readonly write: number
}

const ZERO = BigDecimal.make(0n, 0)

/**
 * A call's cost: prompt tokens at the input price, completion tokens at the output price; of the
 * prompt, tokens read from or written to the provider's cache at their own prices (unset: the input price).
 */
export const costOf = (candidate: Candidate, usage: Usage, cache?: CacheUsage) => {
  const output = perMillion(usage.completion_tokens, candidate.outputUsdPerMtok)
  if (cache === undefined) return BigDecimal.sum(perMillion(usage.prompt_tokens, candidate.inputUsdPerMtok), output)
  const input = candidate.inputUsdPerMtok
  const uncached = Math.max(0, usage.prompt_tokens - cache.read - cache.write)
  return BigDecimal.sum(
    BigDecimal.sum(perMillion(uncached, input), output),
    BigDecimal.sum(perMillion(cache.read, candidate.cacheReadUsdPerMtok ?? input), perMillion(cache.write, candidate.cacheWriteUsdPerMtok ?? input))
  )
}

/** The gateway's own count of a call: the admission's prompt estimate and the emitted text's tokens. */
export const estimatedUsage = (admitted: Admitted, completion: number): Usage => ({
  prompt_tokens: admitted.promptEstimate,
  completion_tokens: completion,
  total_tokens: admitted.promptEstimate + completion
})

/**
 * `gen_ai.operation.name` by request type: the conventions' operation names, in which a
 * Responses API call is a `chat` too (`gateway.request_type` on the span tells them apart).
 */
const GEN_AI_OPERATION: Record<RequestType, string> = { "chat.completion": "chat", response: "chat", agent: "chat", embedding: "embeddings", messages: "chat" }
export const genAiOperation = (requestType: RequestType): string => GEN_AI_OPERATION[requestType]

/** The `operation` label of the gateway's own metrics (gateway.inference.requests and its duration): by API. */
const GATEWAY_OPERATION: Record<RequestType, string> = {
  "chat.completion": "chat",
  response: "responses",
  agent: "responses",
  embedding: "embeddings",
  messages: "messages"
}

/** The model call's span name, per the GenAI conventions: `{gen_ai.operation.name} {gen_ai.request.model}`. */
export const callSpanName = (admitted: Admitted): string => `${genAiOperation(admitted.requestType)} ${admitted.request.model}`

/** What the call's span knows when it starts: the operation, the request's model and parameters, whose call. */
export const callSpanAttributes = (admitted: Admitted): Record<string, unknown> => {
  const request = admitted.request
  const caller = admitted.caller
  return {
    "gen_ai.operation.name": genAiOperation(admitted.requestType),
    "gen_ai.request.model": request.model,
    "gateway.request_type": admitted.requestType,
    ...(request.max_tokens ?? request.max_completion_tokens) === undefined
      ? {}
      : { "gen_ai.request.max_tokens": request.max_tokens ?? request.max_completion_tokens },
    ...(request.temperature === undefined ? {} : { "gen_ai.request.temperature": request.temperature }),
    ...(request.top_p === undefined ? {} : { "gen_ai.request.top_p": request.top_p }),
    "platform.id": caller.platformId,
    ...(caller._tag === "EndUserKey" ? { "end_user.id": caller.endUserId } : {})
  }
}

const requestsBy = taggedBy(inferenceRequests, "operation", "status")
const durationBy = taggedBy(inferenceDuration, "operation")

/**
 * The GenAI instruments of one operation, provider, request model, response model and platform,
 * tagged once (hot-path rule "metrics pre-keyed"): a call looks them up once.
 */
const callInstruments = madeOnce((operation, provider, model, responseModel, platformId) => {
  const labels = [
    MetricLabel.make("gen_ai.operation.name", operation!),
    MetricLabel.make("gen_ai.provider.name", provider!),
    MetricLabel.make("gen_ai.request.model", model!),
    MetricLabel.make("gen_ai.response.model", responseModel!),
    MetricLabel.make("platform.id", platformId!)
  ]
  const tagged = <Type extends MetricKey.MetricKey.Histogram>(key: Type, ...more: Array<MetricLabel.MetricLabel>) =>
    Metric.fromMetricKey(MetricKey.taggedWithLabels(key, [...labels, ...more]))
  return {
    inputTokens: tagged(tokenUsage, MetricLabel.make("gen_ai.token.type", "input")),
    outputTokens: tagged(tokenUsage, MetricLabel.make("gen_ai.token.type", "output")),
    duration: tagged(requestDuration),
    timeToFirstToken: tagged(timeToFirstToken),
    timePerOutputToken: tagged(timePerOutputToken),
    cost: Metric.fromMetricKey(MetricKey.taggedWithLabels(costUsd, [labels[2]!, labels[4]!]))
  }
})

/** The duration of a call that ended in an error, tagged `error.type`. */
const failedDurationBy = taggedBy(requestDuration, "gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model", "platform.id", "error.type")

/** `error.type` of a settled call that ended in an error: the upstream dropped mid-stream. */
const UPSTREAM_DROPPED = "upstream_dropped"

/**
 * The call's metrics, updated in one step (hot-path rule "metrics pre-keyed, updated in one
 * step"): Metric effects run by Effect.all cost runtime operations on every call. No fiber-level metric tags are used
 * anywhere (Effect.tagMetrics), so updating without them is what Metric.update would do.
 */
export const recordMetrics = (admitted: Admitted, outcome: Outcome, cost: BigDecimal.BigDecimal, durationMs: number) => {
  const operation = genAiOperation(admitted.requestType)
  const candidate = outcome.candidate
  const model = admitted.request.model
  const usage = outcome.usage
  requestsBy(GATEWAY_OPERATION[admitted.requestType], outcome.status).unsafeUpdate(1, [])
  durationBy(GATEWAY_OPERATION[admitted.requestType]).unsafeUpdate(durationMs, [])
  const call = callInstruments(operation, genAiProvider(candidate.kind), model, candidate.providerModelId, admitted.caller.platformId)
  call.inputTokens.unsafeUpdate(usage.prompt_tokens, [])
  call.outputTokens.unsafeUpdate(usage.completion_tokens, [])
  call.cost.unsafeUpdate(BigDecimal.unsafeToNumber(cost), [])
  if (outcome.status === "error") {
    failedDurationBy(operation, genAiProvider(candidate.kind), model, admitted.caller.platformId, UPSTREAM_DROPPED).unsafeUpdate(durationMs / 1000, [])
  } else {
    call.duration.unsafeUpdate(durationMs / 1000, [])
  }
  const firstTokenMs = outcome.timeToFirstTokenMs
  if (firstTokenMs === undefined) return
  call.timeToFirstToken.unsafeUpdate(firstTokenMs / 1000, [])
  // After the first token: the rest of the call over the tokens that followed it.
  if (outcome.status === "success" && usage.completion_tokens > 1) {
    call.timePerOutputToken.unsafeUpdate((durationMs - firstTokenMs) / 1000 / (usage.completion_tokens - 1), [])
  }
}

/** The duration of a call no upstream served (502 or 504), tagged `error.type` (the error's code), on the first candidate's provider. */
export const recordFailure = (admitted: Admitted, errorType: string, durationMs: number) => {
  const provider = admitted.candidates[0] === undefined ? "" : genAiProvider(admitted.candidates[0].kind)
  failedDurationBy(genAiOperation(admitted.requestType), provider, admitted.request.model, admitted.caller.platformId, errorType)
    .unsafeUpdate(durationMs / 1000, [])
}

/** Host and port of an upstream's base URL (`server.address`, `server.port`), parsed once per URL. */
const serverOf = madeOnce((baseUrl) => {
  try {
    const url = new URL(baseUrl!)
    return { address: url.hostname, port: url.port === "" ? (url.protocol === "https:" ? 443 : 80) : Number(url.port) }
  } catch {
    return null
  }
})

/** The settled call on its GenAI span: the conventions' response attributes, and the first content as an event (streams). */
const annotateCall = (span: Tracer.Span, admitted: Admitted, outcome: Outcome, cost: BigDecimal.BigDecimal) => {
  const candidate = outcome.candidate
  const provider = genAiProvider(candidate.kind)
  span.attribute("gen_ai.provider.name", provider)
  // The attribute's name before the conventions renamed it, still read by many tools.
  span.attribute("gen_ai.system", provider)
  span.attribute("gateway.provider", candidate.providerSlug)
  span.attribute("gen_ai.response.model", candidate.providerModelId)
  span.attribute("gen_ai.response.id", admitted.requestId)
  span.attribute("gen_ai.usage.input_tokens", outcome.usage.prompt_tokens)
  span.attribute("gen_ai.usage.output_tokens", outcome.usage.completion_tokens)
  if (outcome.finishReasons !== undefined) listAttribute(span, "gen_ai.response.finish_reasons", outcome.finishReasons)
  const server = serverOf(candidate.baseUrl)
  if (server !== null) {
    span.attribute("server.address", server.address)
    span.attribute("server.port", server.port)
  }
  span.attribute("gateway.cost_usd", BigDecimal.format(cost))
  span.attribute("gateway.token_count_method", outcome.method)
  if (outcome.status === "error") span.attribute("error.type", UPSTREAM_DROPPED)
  if (outcome.timeToFirstTokenMs !== undefined) {
    span.attribute("gen_ai.server.time_to_first_token_ms", outcome.timeToFirstTokenMs)
    const at = BigInt(admitted.startedAt + outcome.timeToFirstTokenMs) * 1_000_000n
    span.event("gen_ai.first_token", at, { "gen_ai.server.time_to_first_token_ms": outcome.timeToFirstTokenMs })
  }
}

/**
 * Puts the settled call on its GenAI span (`call`; none: the current span) and gives the current
 * span, the settlement's parent.
 */
export const annotateSettlement = (admitted: Admitted, outcome: Outcome, cost: BigDecimal.BigDecimal, call: Tracer.Span | undefined) =>
  Effect.map(currentSpan, (current) => {
    const target = call ?? (current._tag === "Some" ? current.value : undefined)
    if (target !== undefined && target.spanId !== "noop") annotateCall(target, admitted, outcome, cost)
    return current
  })

/** The log row's metadata: the request's ids, whether it streamed, out-of-bounds usage and cache tokens when there are. */
const metadataOf = (admitted: Admitted, outcome: Outcome): Record<string, unknown> => {
  const metadata: Record<string, unknown> = { request_id: admitted.requestId, x_request_id: admitted.exchange?.id, stream: admitted.request.stream === true }
  if (outcome.reportedUsage !== undefined) metadata.reported_usage = outcome.reportedUsage
  if (outcome.cache !== undefined) {
    metadata.cache_read_input_tokens = outcome.cache.read
    metadata.cache_creation_input_tokens = outcome.cache.write
  }
  return metadata
}

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
      metadata: metadataOf(admitted, outcome)
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
