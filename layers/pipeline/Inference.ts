// Inference: the one pipeline behind chat completions. The five pre-flight checks (Preflight) run
// in the spec's order as a typed error channel (none reaches the upstream), then routing with failover,
// then settlement (budget debit row, platform wallet debit, inference log), queued for the
// grouped writer in Settlements.
import { PgClient } from "@effect/sql-pg"
import { BigDecimal, Cause, Effect, type Exit, Option, Stream, type Tracer } from "effect"
import { randomUUID } from "node:crypto"
import type { ChatChunk, ChatCompletion, ChatRequest, Usage } from "../../schemas/Chat.js"
import type { PlatformSettings } from "../../schemas/Platforms.js"
import type { BadGateway, GatewayTimeout } from "../../schemas/Errors.js"
import { countConfig, durationMsConfig } from "../lib/ConfigValues.js"
import { objectId } from "../lib/Ids.js"
import { perMillion } from "../lib/Money.js"
import { annotateCurrentSpan, callSpans, currentSpan, tracingEnabled, withTraceparent } from "../lib/CurrentSpan.js"
import { nextPeriodStart } from "../lib/Periods.js"
import { AdmissionCache } from "./AdmissionCache.js"
import { type AdmissionSnapshot, loadAdmissionSnapshot } from "./AdmissionSnapshot.js"
import { ProviderKeys } from "../tenancy/ProviderKeys.js"
import { actorOf, BudgetLedger, type BudgetRow } from "../ledger/BudgetLedger.js"
import { costUsd, inferenceDuration, inferenceRequests, preflightRejections, taggedBy, tokensUsed } from "../platform/Metrics.js"
import { type Candidate, orderCandidates, ProviderRouter } from "./ProviderRouter.js"
import type { BudgetExpectation } from "../ledger/Settlement.js"
import { Settlements, unsettled } from "../ledger/Settlements.js"
import {
  type Caller,
  checkBudget,
  checkModel,
  checkRateLimit,
  checkSuspension,
  checkWallet,
  refusedWhateverTheSize,
  type RequestType
} from "./Preflight.js"
import { RateLimiter, type RateLimits, type RateLimitState } from "./RateLimiter.js"
import {
  countEmittedPrefix,
  countPromptTokens,
  countPromptTokensYielding,
  countTextTokens,
  countTextTokensYielding,
  EMITTED_TEXT_KEPT,
  promptChars,
  SLICE_CHARS
} from "../platform/Tokenizer.js"
import { UpstreamAdapters } from "./upstream/Adapters.js"
import type { UpstreamError } from "./upstream/Upstream.js"

export type { Caller, PreflightError, RequestType } from "./Preflight.js"
type WalletSettings = NonNullable<PlatformSettings["end_user_wallet"]>

/** Per upstream attempt, until the answer (or the stream's headers) arrives. */
export const upstreamTimeoutMs = durationMsConfig("GATEWAY_UPSTREAM_TIMEOUT", 60_000, 1, "GATEWAY_UPSTREAM_TIMEOUT_MS")

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
const UNTRUSTED_USAGE = "reported usage out of bounds; billed on the gateway's token count"
const DROPPED = "upstream dropped mid-stream"

/** A stream's emitted text: the tokens of what was counted already, and the text not counted yet. */
interface EmittedText {
  readonly counted: number
  readonly text: string
}
const emittedTokens = (emitted: EmittedText) => emitted.counted + countTextTokens(emitted.text)

/** Everything settlement needs, fixed at admission. */
export interface Admitted {
  readonly requestId: string
  /** The log row's request_type: `chat.completion` or `response`. */
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
  readonly startedAt: number
}

const budgetExpectation = (row: BudgetRow): BudgetExpectation => ({
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

const costOf = (candidate: Candidate, usage: Usage) =>
  BigDecimal.sum(perMillion(usage.prompt_tokens, candidate.inputUsdPerMtok), perMillion(usage.completion_tokens, candidate.outputUsdPerMtok))

const requestsBy = taggedBy(inferenceRequests, "operation", "status")
const durationBy = taggedBy(inferenceDuration, "operation")
const tokensBy = taggedBy(tokensUsed, "gen_ai.token.type", "gen_ai.request.model")
const costBy = taggedBy(costUsd, "gen_ai.request.model")
const rejectionsBy = taggedBy(preflightRejections, "code")

export class Inference extends Effect.Service<Inference>()("gateway/Inference", {
  dependencies: [AdmissionCache.Default, BudgetLedger.Default, ProviderKeys.Default, ProviderRouter.Default, RateLimiter.layerFromConfig, Settlements.Default, UpstreamAdapters.layer],
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const router = yield* ProviderRouter
    const ledger = yield* BudgetLedger
    const limiter = yield* RateLimiter
    const adapters = yield* UpstreamAdapters
    const keys = yield* ProviderKeys
    const settlements = yield* Settlements
    const admissionCache = yield* AdmissionCache
    const attemptTimeoutMs = yield* upstreamTimeoutMs
    // Characters of message text one request may carry (contents, tool-call names and
    // arguments): checked before anything is counted, well under the body size limit.
    const maxPromptChars = yield* countConfig("GATEWAY_MAX_PROMPT_CHARS", 2_000_000)

    // Whether this instance makes spans is settled when it starts (TracingLive): without an
    // exporter, a per-call span helper or span annotation is a runtime operation and a closure for
    // nothing, so they are left out from the start. The clock is taken once too.
    const tracing = yield* tracingEnabled
    const span = callSpans(tracing)
    const clock = yield* Effect.clock
    /** A pre-flight check as a step of admission: in a span of its own with tracing on. */
    const step = <A, E>(name: string, check: () => Effect.Effect<A, E>): Effect.Effect<A, E> =>
      tracing ? Effect.suspend(check).pipe(span(name)) : check()

    /** Check 3's locked path: the live budget, after the due period reset (null: none). */
    const liveBudget = (platformId: string, endUserId: string) =>
      ledger.get(platformId, endUserId).pipe(Effect.catchTag("NotFound", () => Effect.succeed(null)))

    /**
     * The prompt estimate of a prompt over SLICE_CHARS: counted in slices that let other
     * requests run meanwhile, or not at all when the checks refuse the call whatever it is.
     */
    const estimateLargePrompt = (caller: Caller, snapshot: AdmissionSnapshot, request: ChatRequest): Effect.Effect<number> =>
      refusedWhateverTheSize(caller, snapshot, clock.unsafeCurrentTimeMillis()) ? Effect.succeed(0) : countPromptTokensYielding(request.messages)

    // Every generator of a call is defined once, here (Effect.fnUntraced), never inside a
    // per-call function (`(x) => Effect.gen(function*() {...})`): V8 gives each new generator
    // function a map of its own when it first runs, maps live in the old generation, and the
    // map keeps the function and all it closes over (the request) alive through every scavenge
    // until the next full collection (hot-path rule "generators made once", docs/performance.md).
    /** One read of the admission snapshot, with this instance's queued settlements it does not include yet. */
    const readEntry = Effect.fnUntraced(function*(platformId: string, endUserId: string | null, model: string) {
      const loadedAt = Date.now()
      const totals = settlements.submitted(platformId, endUserId)
      const pending = settlements.pendingOf(platformId)
      const snapshot = yield* loadAdmissionSnapshot(sql, keys.reveal, platformId, endUserId, model, pending.map((s) => s.id))
      const queued = unsettled(pending, snapshot.committed, endUserId)
      return { snapshot, loadedAt, unsettled: queued, totals }
    })
    const loadEntry = Effect.fnUntraced(function*(platformId: string, endUserId: string | null, model: string) {
      const userHadQueued = settlements.pendingOf(platformId).some((s) => s.endUserId === endUserId)
      const entry = yield* readEntry(platformId, endUserId, model)
      if (endUserId === null || entry.snapshot.settings.end_user_wallet?.enabled !== true) return { entry, cacheable: true }
      // used_display moves with every settled call: keep nothing, and if the read may have
      // missed some of the user's queued calls, wait for them and read again.
      if (!userHadQueued) return { entry, cacheable: false }
      yield* settlements.awaitPlatform(platformId, endUserId)
      return { entry: yield* readEntry(platformId, endUserId, model), cacheable: false }
    })
    /**
     * What admission reads, with this instance's queued settlements applied: the snapshot tells
     * which of them it already saw, so each cost counts exactly once; costs queued since then
     * come from Settlements' running totals. Cached for a moment (AdmissionCache). The display
     * ledger's charge is decided at write time, so with a display wallet the snapshot is read
     * fresh, after the user's queued calls are written.
     */
    const readSnapshot = Effect.fnUntraced(function*(caller: Caller, model: string) {
      const platformId = caller.platformId
      const endUserId = caller._tag === "EndUserKey" ? caller.endUserId : null
      const entry = yield* admissionCache.getOrLoad(platformId, endUserId, model, loadEntry(platformId, endUserId, model))
      const totals = settlements.submitted(platformId, endUserId)
      const budget = BigDecimal.sum(entry.unsettled.budget, BigDecimal.subtract(totals.budget, entry.totals.budget))
      const wallet = BigDecimal.sum(entry.unsettled.wallet, BigDecimal.subtract(totals.wallet, entry.totals.wallet))
      const snapshot: AdmissionSnapshot = {
        ...entry.snapshot,
        held: BigDecimal.sum(entry.snapshot.held, budget),
        walletBalance: BigDecimal.subtract(entry.snapshot.walletBalance, wallet)
      }
      return snapshot
    })

    /**
     * The five checks, in the spec's order, on one snapshot read in a single round trip;
     * nothing here calls an upstream or moves money.
     */
    const checks = Effect.fnUntraced(function*(caller: Caller, request: ChatRequest, requestType: RequestType) {
      const startedAt = clock.unsafeCurrentTimeMillis()
      const snapshot = yield* readSnapshot(caller, request.model)
      const chars = promptChars(request.messages)
      const maxTokens = yield* step("preflight.model", () => checkModel(caller, request, snapshot.candidates, chars, requestType, maxPromptChars))
      // A small prompt is counted at once, as part of this step; a large one in slices.
      const promptEstimate = chars <= SLICE_CHARS ? countPromptTokens(request.messages) : yield* estimateLargePrompt(caller, snapshot, request)
      const { limits, rateLimit } = yield* step("preflight.rate_limit", () => checkRateLimit(caller, snapshot, promptEstimate, limiter))
      const live = yield* step("preflight.suspension", () => checkSuspension(caller, snapshot, clock.unsafeCurrentTimeMillis(), liveBudget))
      yield* step("preflight.budget", () => checkBudget(live?.is_active === true ? live : null, snapshot))
      yield* step("preflight.wallet", () => checkWallet(snapshot, promptEstimate, maxTokens))
      const admitted: Admitted = {
        requestId: objectId(requestType === "response" ? "resp_" : "chatcmpl-"),
        requestType,
        caller,
        request,
        candidates: orderCandidates(snapshot.candidates),
        promptEstimate,
        limits,
        rateLimit,
        displaySettings: caller._tag === "EndUserKey" ? snapshot.settings.end_user_wallet ?? null : null,
        budget: live === null ? null : live.is_active ? budgetExpectation(live) : undefined,
        startedAt
      }
      return admitted
    })
    const admit = (caller: Caller, request: ChatRequest, requestType: RequestType = "chat.completion") =>
      checks(caller, request, requestType).pipe(
        Effect.tapError((e) => Effect.sync(() => rejectionsBy("code" in e ? e.code : "rate_limit_exceeded").unsafeUpdate(1, []))),
        span("Inference.admit", () => ({
          "gen_ai.operation.name": requestType === "response" ? "responses" : "chat",
          "gen_ai.request.model": request.model,
          "platform.id": caller.platformId,
          ...(caller._tag === "EndUserKey" ? { "end_user.id": caller.endUserId } : {})
        }))
      )

    /**
     * The call's metrics, updated in one step (hot-path rule "metrics pre-keyed, updated in one
     * step"): five Metric effects run by Effect.all cost runtime operations on every call. No fiber-level metric tags are used
     * anywhere (Effect.tagMetrics), so updating without them is what Metric.update would do.
     */
    const recordMetrics = (admitted: Admitted, outcome: Outcome, cost: BigDecimal.BigDecimal, durationMs: number) => {
      const operation = admitted.requestType === "response" ? "responses" : "chat"
      const model = admitted.request.model
      requestsBy(operation, outcome.status).unsafeUpdate(1, [])
      durationBy(operation).unsafeUpdate(durationMs, [])
      tokensBy("input", model).unsafeUpdate(outcome.usage.prompt_tokens, [])
      tokensBy("output", model).unsafeUpdate(outcome.usage.completion_tokens, [])
      costBy(model).unsafeUpdate(BigDecimal.unsafeToNumber(cost), [])
    }

    /** The settled call on its span: GenAI attributes, and the first content as an event (streams). */
    const annotateSettlement = (admitted: Admitted, outcome: Outcome, cost: BigDecimal.BigDecimal) =>
      Effect.zipRight(
        annotateCurrentSpan({
          "gen_ai.operation.name": admitted.requestType === "response" ? "responses" : "chat",
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

    const noParent = Effect.succeed(Option.none<Tracer.Span>())

    /** Queues the call's settlement (log row, budget debit, wallet debit); never interrupted half-way. */
    const settle = (admitted: Admitted, outcome: Outcome) =>
      Effect.suspend(() => {
        const caller = admitted.caller
        const cost = costOf(outcome.candidate, outcome.usage)
        const now = new Date(clock.unsafeCurrentTimeMillis())
        recordMetrics(admitted, outcome, cost, now.getTime() - admitted.startedAt)
        // The span carries the settlement's attributes, and the writes join its trace.
        return Effect.flatMap(tracing ? annotateSettlement(admitted, outcome, cost) : noParent, (parent) => {
          const details = {
            request_id: admitted.requestId,
            model: admitted.request.model,
            provider: outcome.candidate.providerSlug,
            provider_model_id: outcome.candidate.providerModelId,
            prompt_tokens: outcome.usage.prompt_tokens,
            completion_tokens: outcome.usage.completion_tokens,
            token_count_method: outcome.method
          }
          // The log row's id is this settlement's identity: a retry after an unacknowledged COMMIT
          // finds it and applies nothing twice. The writes are queued (Settlements): the answer
          // does not wait for them.
          const queued = settlements.submit({
            id: randomUUID(),
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
              metadata: outcome.reportedUsage === undefined
                ? { request_id: admitted.requestId, stream: admitted.request.stream === true }
                : { request_id: admitted.requestId, stream: admitted.request.stream === true, reported_usage: outcome.reportedUsage }
            },
            details,
            actor: actorOf(caller),
            displaySettings: admitted.displaySettings,
            parent,
            budget: admitted.budget
          })
          return caller._tag === "EndUserKey"
            ? Effect.zipRight(queued, limiter.settle(caller.endUserId, admitted.limits, admitted.promptEstimate, outcome.usage.total_tokens))
            : queued
        })
      }).pipe(
        Effect.catchAllCause((cause) => Effect.logError("settlement failed", cause)),
        Effect.uninterruptible,
        span("Inference.settle")
      )

    /** The gateway's own count of a call: the admission's prompt estimate and the emitted text's tokens. */
    const estimatedUsage = (admitted: Admitted, completion: number): Usage => ({
      prompt_tokens: admitted.promptEstimate,
      completion_tokens: completion,
      total_tokens: admitted.promptEstimate + completion
    })

    /** The text a completion emitted: its messages' content and tool-call arguments. */
    const answerText = (completion: ChatCompletion): string =>
      completion.choices.map((choice) =>
        (choice.message.content ?? "") + (choice.message.tool_calls ?? []).map((call) => call.function.arguments).join("")
      ).join("")

    /** One upstream attempt's call; W3C traceparent names the attempt's span as the parent. */
    const callFor = (admitted: Admitted, candidate: Candidate) =>
      withTraceparent((traceparent) => ({
        baseUrl: candidate.baseUrl,
        apiKey: candidate.apiKey,
        providerModelId: candidate.providerModelId,
        request: admitted.request,
        timeoutMs: attemptTimeoutMs,
        headers: traceparent === null ? {} : { traceparent }
      }))

    const answerAndSettle = Effect.fnUntraced(function*(admitted: Admitted) {
      const { value, candidate } = yield* router.route(
        admitted.candidates,
        (c) => Effect.flatMap(callFor(admitted, c), adapters.get(c.kind).complete)
      )
      if (usageInBounds(value.usage)) {
        yield* settle(admitted, { candidate, usage: value.usage, method: "reported", status: "success", errorMessage: null })
        return { ...value, id: admitted.requestId, model: admitted.request.model }
      }
      // The answer carries the usage it was billed for.
      const usage = estimatedUsage(admitted, yield* countTextTokensYielding(answerText(value)))
      yield* settle(admitted, { candidate, usage, method: "estimated", status: "success", errorMessage: UNTRUSTED_USAGE, reportedUsage: value.usage })
      return { ...value, id: admitted.requestId, model: admitted.request.model, usage }
    })

    /** Non-streaming: route with failover, settle with the reported usage (the gateway's count when it is out of bounds). */
    const complete = (admitted: Admitted): Effect.Effect<ChatCompletion, BadGateway | GatewayTimeout> =>
      // Once sent upstream, a call runs to its answer (each attempt bounded by the upstream
      // timeout) and is settled even if the client has left, since the provider bills it either
      // way: uninterruptible, so a client that leaves interrupts the request once the call is
      // settled. Not forked (hot-path rule "no context copies per call"): a fork copies every
      // FiberRef of the fiber and a join merges them back, the whole context of services included.
      Effect.uninterruptible(answerAndSettle(admitted))

    /**
     * Streaming: failover happens before the first byte; afterwards an upstream drop ends the
     * stream with finish_reason stop (and no [DONE]). Whatever ends the stream (completion,
     * drop, client disconnect), emitted tokens are settled exactly once.
     */
    const stream = Effect.fnUntraced(function*(admitted: Admitted) {
      const state = {
        /** The emitted text not counted yet: at most about EMITTED_TEXT_KEPT characters. */
        text: "",
        /** Tokens of the emitted text counted already (countEmittedPrefix). */
        counted: 0,
        usage: null as Usage | null,
        /** The provider's usage when it was out of bounds (then `usage` is the gateway's count). */
        reported: null as Usage | null,
        dropped: false,
        done: false,
        created: 0,
        firstTokenAt: 0
      }
      /** What the stream carried so far, settled on the candidate that served it. */
      const settleStream = (candidate: Candidate) =>
        Effect.suspend(() => {
          const trusted = state.reported === null ? state.usage : null
          const completion = trusted?.completion_tokens ?? emittedTokens(state)
          const prompt = trusted?.prompt_tokens ?? admitted.promptEstimate
          return settle(admitted, {
            candidate,
            usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion },
            method: trusted !== null ? "reported" : "estimated",
            status: state.dropped ? "error" : state.usage !== null || state.done ? "success" : "interrupted",
            errorMessage: state.reported === null
              ? (state.dropped ? DROPPED : null)
              : state.dropped ? `${DROPPED}; ${UNTRUSTED_USAGE}` : UNTRUSTED_USAGE,
            timeToFirstTokenMs: state.firstTokenAt === 0 ? undefined : state.firstTokenAt - admitted.startedAt,
            reportedUsage: state.reported ?? undefined
          })
        })
      const includeUsage = admitted.request.stream_options?.include_usage === true
      /**
       * Notes what the chunk carries (for the settlement) and gives it the gateway's id and model;
       * the adapter applies it as the stream yields each chunk (UpstreamCall.step).
       */
      const relabel = (chunk: ChatChunk): ChatChunk | undefined => {
        state.created = chunk.created
        for (const choice of chunk.choices) {
          if (state.firstTokenAt === 0 && (choice.delta.content ?? "") !== "") state.firstTokenAt = Date.now()
          state.text += choice.delta.content ?? ""
          for (const call of choice.delta.tool_calls ?? []) state.text += call.function?.arguments ?? ""
          if (choice.finish_reason !== null) state.done = true
        }
        // Memory per stream stays bounded: past EMITTED_TEXT_KEPT the final part of the text is counted and let go.
        if (state.text.length >= EMITTED_TEXT_KEPT) {
          const { tokens, rest } = countEmittedPrefix(state.text)
          state.counted += tokens
          state.text = rest
        }
        if (chunk.usage) {
          if (usageInBounds(chunk.usage)) {
            state.usage = chunk.usage
            state.reported = null
          } else {
            state.reported = chunk.usage
            state.usage = estimatedUsage(admitted, emittedTokens(state))
          }
        }
        if (!includeUsage && chunk.choices.length === 0) return undefined // the usage-only chunk
        const relabeled = { ...chunk, id: admitted.requestId, model: admitted.request.model }
        if (chunk.usage == null || (includeUsage && state.reported === null)) return relabeled
        // Without include_usage no usage is relayed; with it, the usage the call is billed for.
        return { ...relabeled, usage: includeUsage ? state.usage ?? undefined : undefined }
      }
      // The attempt in flight: a client that leaves before the first byte, once the request
      // went upstream, is settled as one that leaves mid-stream (interrupted: its prompt, no
      // completion tokens), since the provider has the prompt either way.
      let inFlight: Candidate | undefined
      /** The served attempt's stream ended: settled in the adapter's finalizer (UpstreamCall.onEnd). */
      const ended = (c: Candidate) => (exit: Exit.Exit<unknown, UpstreamError>) =>
        Effect.suspend(() => {
          // A failure is a drop mid-stream; interruption (the client left) and defects are not.
          if (exit._tag === "Failure" && Option.isSome(Cause.failureOption(exit.cause))) state.dropped = true
          return settleStream(c)
        })
      const { value: chunks } = yield* router.route(
        admitted.candidates,
        (c) =>
          Effect.flatMap(callFor(admitted, c), (call) => {
            inFlight = c
            return adapters.get(c.kind).stream({ ...call, step: relabel, onEnd: ended(c) }).pipe(
              Effect.tapError(() => Effect.sync(() => (inFlight = undefined)))
            )
          })
      ).pipe(Effect.onInterrupt(() => inFlight === undefined ? Effect.void : settleStream(inFlight)))
      const body = chunks.pipe(
        // The drop was noted (and settled) by `ended`, which runs before this handler.
        Stream.catchAll((error) => {
          const stop: ChatChunk = {
            id: admitted.requestId,
            object: "chat.completion.chunk",
            created: state.created,
            model: admitted.request.model,
            choices: [{ index: 0, delta: {}, finish_reason: "stop" }]
          }
          return Stream.make(stop).pipe(Stream.tap(() => Effect.logWarning(`upstream dropped mid-stream: ${error.message}`)))
        })
      )
      return { chunks: body, dropped: () => state.dropped }
    })

    return { admit, complete, stream, settle } as const
  })
}) {}
