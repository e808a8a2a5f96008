// Inference: the one pipeline behind chat completions (and the Responses, embeddings and Messages
// APIs, through `serve` and `openStream`). The five pre-flight checks (Preflight) run
// in the spec's order as a typed error channel (none reaches the upstream); a later turn of one
// request (the hybrid loop) passes checks 2 to 5 again (admitTurn). Then routing with failover,
// then settlement (budget debit row, platform wallet debit, inference log; InferenceSettlement),
// queued for the grouped writer in Settlements. A stream's tally is InferenceStream.
import { PgClient } from "@effect/sql-pg"
import { BigDecimal, Cause, Effect, Exit, FiberId, FiberRef, Option, Stream, type Tracer } from "effect"
import type { BudgetRow } from "../ledger/BudgetLedger.js"
import type { ChatChunk, ChatCompletion, ChatRequest, Usage } from "../../schemas/Chat.js"
import type { BadGateway, GatewayTimeout, PaymentRequired } from "../../schemas/Errors.js"
import { countConfig, durationMsConfig } from "../lib/ConfigValues.js"
import { objectId, timeOrderedUuid } from "../lib/Ids.js"
import { currentExchange, upstreamAnswered, upstreamStarted } from "../lib/RequestIds.js"
import { callSpans, tracingEnabled, withTraceparent } from "../lib/CurrentSpan.js"
import { AdmissionCache, type CachedAdmission } from "./AdmissionCache.js"
import { type AdmissionSnapshot, loadAdmissionSnapshot } from "./AdmissionSnapshot.js"
import { ProviderKeys } from "../tenancy/ProviderKeys.js"
import { BudgetLedger } from "../ledger/BudgetLedger.js"
import { preflightRejections, taggedBy } from "../platform/Metrics.js"
import { type Candidate, orderCandidates, ProviderRouter } from "./ProviderRouter.js"
import { CallRecords, type TrackedCall } from "../ledger/CallRecords.js"
import { Reservations } from "../ledger/Reservations.js"
import { Settlements, unsettled } from "../ledger/Settlements.js"
import {
  type Admitted,
  annotateSettlement,
  budgetExpectation,
  type CacheUsage,
  callSpanAttributes,
  callSpanName,
  costOf,
  estimatedUsage,
  genAiOperation,
  type Outcome,
  recordFailure,
  recordMetrics,
  settlementOf,
  UNTRUSTED_USAGE,
  usageInBounds
} from "./InferenceSettlement.js"
import { streamTally } from "./InferenceStream.js"
import { recoverWith } from "../lib/StreamPull.js"
import {
  budgetExhausted,
  type Caller,
  checkBudget,
  checkDisplay,
  checkModel,
  checkRateLimit,
  checkSuspension,
  checkWallet,
  DEFAULT_MAX_TOKENS,
  maxCostEstimate,
  type PreflightError,
  refusedWhateverTheSize,
  type RequestType,
  reservesBudget,
  walletRefusal
} from "./Preflight.js"
import { RateLimiter, type RateLimitExceeded } from "./RateLimiter.js"
import {
  countPromptTokens,
  countPromptTokensYielding,
  countTextTokensYielding,
  countToolTokensYielding,
  promptChars,
  SLICE_CHARS,
  toolsText
} from "../platform/Tokenizer.js"
import { UpstreamAdapters } from "./upstream/Adapters.js"
import type { UpstreamCall, UpstreamError } from "./upstream/Upstream.js"

export type { Caller, PreflightError, RequestType } from "./Preflight.js"
export { type Admitted, MAX_REPORTED_TOKENS, type Outcome, usageInBounds } from "./InferenceSettlement.js"

/** What a served non-chat call gives back: the usage it reports, with its prompt-cache tokens when it has any. */
export interface Served {
  readonly usage: Usage
  readonly cache?: CacheUsage | undefined
}

/** What a stream's settlement reads: its outcome on the candidate that served it, and a drop mid-stream. */
export interface StreamAccount {
  readonly outcome: (candidate: Candidate) => Outcome
  readonly noteDrop: () => void
}

/** What a stream runs once it has ended, however it ended (UpstreamCall.onEnd). */
export type StreamEnd = (exit: Exit.Exit<unknown, UpstreamError>) => Effect.Effect<void>

/** The text a completion emitted (counted when its usage cannot be believed): its messages' content and tool-call arguments. */
export const completionText = (completion: ChatCompletion): string =>
  completion.choices.map((choice) =>
    (choice.message.content ?? "") + (choice.message.tool_calls ?? []).map((call) => call.function.arguments).join("")
  ).join("")

/** Per upstream attempt, until the answer (or the stream's headers) arrives. */
export const upstreamTimeoutMs = durationMsConfig("GATEWAY_UPSTREAM_TIMEOUT", 60_000, 1, "GATEWAY_UPSTREAM_TIMEOUT_MS")

const rejectionsBy = taggedBy(preflightRejections, "code")

/**
 * How long a budget reservation outlives its call's upstream attempts (each bounded by the
 * upstream timeout) before it lapses: a stream's body, and the settlement's queue, run past them.
 */
const RESERVATION_GRACE_MS = 10 * 60_000

/** The prefix of a call's request id, by the id OpenAI gives such an answer (embeddings have none of their own). */
const REQUEST_ID_PREFIX: Readonly<Record<RequestType, string>> = {
  "chat.completion": "chatcmpl-",
  response: "resp_",
  agent: "resp_",
  embedding: "emb-",
  messages: "msg_"
}

/** The log row's message for a call its instance never settled (CallRecords). */
const INSTANCE_STOPPED = "the instance serving the call stopped before it ended; billed for its prompt"

export class Inference extends Effect.Service<Inference>()("gateway/Inference", {
  dependencies: [AdmissionCache.Default, BudgetLedger.Default, CallRecords.Default, ProviderKeys.Default, ProviderRouter.Default, RateLimiter.layerFromConfig, Reservations.Default, Settlements.Default, UpstreamAdapters.layer],
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const router = yield* ProviderRouter
    const ledger = yield* BudgetLedger
    const limiter = yield* RateLimiter
    const adapters = yield* UpstreamAdapters
    const keys = yield* ProviderKeys
    const settlements = yield* Settlements
    const records = yield* CallRecords
    const admissionCache = yield* AdmissionCache
    const reservations = yield* Reservations
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

    /**
     * The prompt estimate: the messages (`chars` of text) and the tool definitions (`tools`,
     * their JSON), which the provider bills as prompt too: an agent's tools can outweigh its
     * messages, and a reservation or a wallet check that left them out would price calls low.
     */
    const estimatePrompt = (caller: Caller, snapshot: AdmissionSnapshot, request: ChatRequest, chars: number, tools: string) => {
      const messages = chars <= SLICE_CHARS ? Effect.succeed(countPromptTokens(request.messages)) : estimateLargePrompt(caller, snapshot, request)
      return tools === "" ? messages : Effect.zipWith(messages, countToolTokensYielding(tools), (m, t) => m + t)
    }

    // Every generator of a call is defined once, here (Effect.fnUntraced), never inside a
    // per-call function (`(x) => Effect.gen(function*() {...})`): V8 gives each new generator
    // function a map of its own when it first runs, maps live in the old generation, and the
    // map keeps the function and all it closes over (the request) alive through every scavenge
    // until the next full collection (hot-path rule "no hidden class per call", docs/performance.md).
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
      return withQueued(entry, platformId, endUserId)
    })
    /**
     * A later turn's snapshot, read past the cache: what happened between the turns (a paid
     * tool call's debit, a suspension written on any instance) counts for the next turn.
     */
    const readFreshSnapshot = Effect.fnUntraced(function*(caller: Caller, model: string) {
      const platformId = caller.platformId
      const endUserId = caller._tag === "EndUserKey" ? caller.endUserId : null
      const { entry } = yield* loadEntry(platformId, endUserId, model)
      return withQueued(entry, platformId, endUserId)
    })
    /** The entry's snapshot with the queued costs it does not include. */
    const withQueued = (entry: CachedAdmission, platformId: string, endUserId: string | null): AdmissionSnapshot => {
      const totals = settlements.submitted(platformId, endUserId)
      const budget = BigDecimal.sum(entry.unsettled.budget, BigDecimal.subtract(totals.budget, entry.totals.budget))
      const wallet = BigDecimal.sum(entry.unsettled.wallet, BigDecimal.subtract(totals.wallet, entry.totals.wallet))
      const snapshot: AdmissionSnapshot = {
        ...entry.snapshot,
        held: BigDecimal.sum(entry.snapshot.held, budget),
        walletBalance: BigDecimal.subtract(entry.snapshot.walletBalance, wallet)
      }
      return snapshot
    }

    /**
     * Whether the model is an agent model (false when the platform may not call it: admission
     * refuses it then). Read from the admission snapshot, so the admission that follows finds it
     * cached.
     */
    const isAgentModel = (caller: Caller, model: string): Effect.Effect<boolean> =>
      Effect.map(readSnapshot(caller, model), (snapshot) => snapshot.candidates[0]?.agent === true)

    /**
     * The five checks, in the spec's order, on one snapshot read in a single round trip;
     * nothing here calls an upstream or moves money.
     */
    const checks = Effect.fnUntraced(function*(caller: Caller, request: ChatRequest, requestType: RequestType) {
      const startedAt = clock.unsafeCurrentTimeMillis()
      const snapshot = yield* readSnapshot(caller, request.model)
      const chars = promptChars(request.messages)
      const tools = toolsText(request.tools)
      const maxTokens = yield* step("preflight.model", () =>
        checkModel(caller, request, snapshot.candidates, chars + tools.length, requestType, maxPromptChars))
      // A model named by an alias: the call is the model's, under its slug (log rows, answers).
      const slug = snapshot.candidates[0]!.modelSlug
      // A small prompt is counted at once, as part of this step; a large one in slices.
      const promptEstimate = chars <= SLICE_CHARS && tools === ""
        ? countPromptTokens(request.messages)
        : yield* estimatePrompt(caller, snapshot, request, chars, tools)
      const spend = yield* spendChecks(caller, snapshot, promptEstimate, maxTokens)
      const named = slug === request.model ? request : { ...request, model: slug }
      const admitted: Admitted = {
        requestId: objectId(REQUEST_ID_PREFIX[requestType]),
        requestType,
        caller,
        request: requestType === "embedding" ? named : cappedAsReserved(named, spend),
        candidates: orderCandidates(snapshot.candidates),
        promptEstimate,
        ...spend,
        startedAt,
        exchange: yield* FiberRef.get(currentExchange)
      }
      return admitted
    })

    /**
     * A reserved call that names no completion cap is sent with the one its reservation priced
     * (DEFAULT_MAX_TOKENS), so the provider bills no more than the reservation holds. Other calls
     * go as asked.
     */
    const cappedAsReserved = (request: ChatRequest, spend: { readonly reservationId?: string | undefined }): ChatRequest =>
      spend.reservationId !== undefined && request.max_tokens === undefined && request.max_completion_tokens === undefined
        ? { ...request, max_completion_tokens: DEFAULT_MAX_TOKENS }
        : request

    /** Checks 2 to 5 (what the call may spend: rate, suspension, budget, wallet) on a snapshot; gives what settlement needs of them. */
    const spendChecks = Effect.fnUntraced(function*(caller: Caller, snapshot: AdmissionSnapshot, promptEstimate: number, maxTokens: number | undefined) {
      const { limits, rateLimit } = yield* step("preflight.rate_limit", () => checkRateLimit(caller, snapshot, promptEstimate, limiter))
      const live = yield* step("preflight.suspension", () => checkSuspension(caller, snapshot, clock.unsafeCurrentTimeMillis(), liveBudget))
      const displaySettings = caller._tag === "EndUserKey" ? snapshot.settings.end_user_wallet ?? null : null
      const budget = live === null ? null : live.is_active ? budgetExpectation(live) : undefined
      if (reservesBudget(snapshot.settings)) {
        const reservationId = yield* step("preflight.reserve", () => reserveMaxCost(caller, snapshot, live, promptEstimate, maxTokens))
        return { limits, rateLimit, displaySettings, budget, reservationId }
      }
      yield* step("preflight.budget", () => checkBudget(live?.is_active === true ? live : null, snapshot))
      yield* step("preflight.wallet", () => checkWallet(snapshot, promptEstimate, maxTokens))
      return { limits, rateLimit, displaySettings, budget }
    })

    /**
     * Checks 4 and 5 in reserve mode: the call's maximum cost is reserved on the live, active
     * budget (none: the wallet only) and the wallet, by the statement that checks what remains
     * there, past the snapshot's numbers. The display ledger is checked on the snapshot as usual.
     */
    const reserveMaxCost = Effect.fnUntraced(function*(
      caller: Caller,
      snapshot: AdmissionSnapshot,
      live: BudgetRow | null,
      promptEstimate: number,
      maxTokens: number | undefined
    ) {
      const budget = caller._tag === "EndUserKey" && live?.is_active === true ? live : null
      yield* checkDisplay(budget, snapshot)
      const amount = maxCostEstimate(snapshot.candidates, promptEstimate, maxTokens)
      const expiresAt = new Date(clock.unsafeCurrentTimeMillis() + attemptTimeoutMs * snapshot.candidates.length + RESERVATION_GRACE_MS)
      const result = yield* reservations.reserve(caller.platformId, budget?.id ?? null, amount, expiresAt)
      if (result._tag === "Reserved") return result.id
      return yield* (result.code === "budget_exhausted" ? budgetExhausted() : walletRefusal(amount, "maximum cost"))
    })

    /** A call that ends with no settlement (no upstream answered): off the records, its reservation released. */
    const dropped = (call: TrackedCall, admitted: Admitted) =>
      admitted.reservationId === undefined
        ? Effect.sync(call.dropped)
        : Effect.zipRight(Effect.sync(call.dropped), reservations.release(admitted.reservationId))

    /**
     * A later turn of one request (the hybrid loop): checks 2 to 5 again, on a fresh snapshot
     * that holds the earlier turns' costs; check 1 passed for the request. The rate limiter
     * counts the turn as a request of its own, with its prompt's tokens, as every upstream call is.
     */
    const turnChecks = Effect.fnUntraced(function*(previous: Admitted, request: ChatRequest) {
      const startedAt = clock.unsafeCurrentTimeMillis()
      const caller = previous.caller
      const snapshot = yield* readFreshSnapshot(caller, request.model)
      const promptEstimate = yield* estimatePrompt(caller, snapshot, request, promptChars(request.messages), toolsText(request.tools))
      const spend = yield* spendChecks(caller, snapshot, promptEstimate, request.max_tokens ?? request.max_completion_tokens)
      const admitted: Admitted = { ...previous, request: cappedAsReserved(request, spend), promptEstimate, ...spend, startedAt }
      return admitted
    })
    const admitTurn = (previous: Admitted, request: ChatRequest): Effect.Effect<Admitted, RateLimitExceeded | PaymentRequired> =>
      turnChecks(previous, request).pipe(admission("Inference.admitTurn", previous.caller, request, previous.requestType))
    /** An admission's refusals counted by code, in a span named for it. */
    const admission = (name: string, caller: Caller, request: ChatRequest, requestType: RequestType) =>
    <A, E extends PreflightError>(self: Effect.Effect<A, E>): Effect.Effect<A, E> =>
      self.pipe(
        Effect.tapError((e) => Effect.sync(() => rejectionsBy("code" in e ? e.code : "rate_limit_exceeded").unsafeUpdate(1, []))),
        span(name, () => ({
          "gen_ai.operation.name": genAiOperation(requestType),
          "gen_ai.request.model": request.model,
          "platform.id": caller.platformId,
          ...(caller._tag === "EndUserKey" ? { "end_user.id": caller.endUserId } : {})
        }))
      )
    const admit = (caller: Caller, request: ChatRequest, requestType: RequestType = "chat.completion") =>
      checks(caller, request, requestType).pipe(admission("Inference.admit", caller, request, requestType))

    const noParent = Effect.succeed(Option.none<Tracer.Span>())

    /**
     * A call that starts, followed by CallRecords: what it comes to if its instance dies before
     * settling it is its prompt estimate on the first candidate, no completion.
     */
    const track = (id: string, admitted: Admitted) =>
      records.track(id, () => {
        const candidate = admitted.candidates[0]!
        const usage = estimatedUsage(admitted, 0)
        const cut: Outcome = { candidate, usage, method: "estimated", status: "interrupted", errorMessage: INSTANCE_STOPPED }
        return settlementOf(id, admitted, cut, costOf(candidate, usage), new Date(clock.unsafeCurrentTimeMillis()), Option.none())
      })

    /**
     * The model call's span (tracing on), per the OpenTelemetry GenAI conventions: named
     * `{operation} {model}`, client kind (the gateway calls a model), from routing to settlement;
     * the upstream attempts and the settlement are its children. Admission comes before it: a
     * refused call is no model call.
     */
    const callSpanOptions = (admitted: Admitted) => ({ kind: "client" as const, captureStackTrace: false, attributes: callSpanAttributes(admitted) })
    const openCallSpan = (admitted: Admitted) => Effect.makeSpan(callSpanName(admitted), callSpanOptions(admitted))
    const closeCallSpan = (callSpan: Tracer.Span, exit: Exit.Exit<unknown, unknown>) =>
      Effect.sync(() => {
        if (callSpan.status._tag !== "Ended") callSpan.end(clock.unsafeCurrentTimeNanos(), exit)
      })
    /** The settled call's end on its span: an error when the upstream dropped mid-stream. */
    const endOf = (outcome: Outcome): Exit.Exit<unknown, unknown> =>
      outcome.status === "error" ? Exit.fail(new Error(outcome.errorMessage ?? "upstream error")) : Exit.void
    /** A call no upstream served (502 or 504): its duration counted with its error code, on its span too. */
    const failed = (admitted: Admitted, error: BadGateway | GatewayTimeout, callSpan: Tracer.Span | undefined) =>
      Effect.sync(() => {
        recordFailure(admitted, error.code, clock.unsafeCurrentTimeMillis() - admitted.startedAt)
        callSpan?.attribute("error.type", error.code)
      })
    /** A non-streaming call that ends with no answer: counted when no upstream served it, then dropped. */
    const unservedCall = (call: TrackedCall, admitted: Admitted, cause: Cause.Cause<BadGateway | GatewayTimeout>, callSpan: Tracer.Span | undefined) => {
      const error = Cause.failureOption(cause)
      return error._tag === "Some" ? Effect.zipRight(failed(admitted, error.value, callSpan), dropped(call, admitted)) : dropped(call, admitted)
    }

    /**
     * Settles the call (log row, budget debit, wallet debit): on record before the answer ends
     * (CallRecords), then queued for the grouped writer; never interrupted half-way. The GenAI
     * attributes go on `callSpan`, the model call's span (none: the current span).
     */
    const settle = (call: TrackedCall, id: string, admitted: Admitted, outcome: Outcome, callSpan?: Tracer.Span) =>
      Effect.suspend(() => {
        const caller = admitted.caller
        const cost = costOf(outcome.candidate, outcome.usage, outcome.cache)
        const now = new Date(clock.unsafeCurrentTimeMillis())
        recordMetrics(admitted, outcome, cost, now.getTime() - admitted.startedAt)
        // The span carries the settlement's attributes, and the writes join its trace. With call
        // records on, the answer ends once the settlement is on record; the writes are queued.
        return Effect.flatMap(tracing ? annotateSettlement(admitted, outcome, cost, callSpan) : noParent, (parent) => {
          const settlement = settlementOf(id, admitted, outcome, cost, now, parent)
          const queued = Effect.zipRight(call.settled(settlement), settlements.submit(settlement))
          return caller._tag === "EndUserKey"
            ? Effect.zipRight(queued, limiter.settle(caller.endUserId, admitted.limits, admitted.promptEstimate, outcome.usage.total_tokens))
            : queued
        })
      }).pipe(
        Effect.catchAllCause((cause) => Effect.logError("settlement failed", cause)),
        Effect.uninterruptible,
        span("Inference.settle")
      )

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

    /** The finish reasons of a completion's choices, for its span. */
    const finishReasonsOf = (completion: ChatCompletion): ReadonlyArray<string> | undefined =>
      tracing ? completion.choices.flatMap((choice) => choice.finish_reason === null ? [] : [choice.finish_reason]) : undefined

    const answerAndSettle = Effect.fnUntraced(function*(admitted: Admitted, callSpan: Tracer.Span | undefined) {
      const id = timeOrderedUuid()
      const call = track(id, admitted)
      upstreamStarted(admitted.exchange)
      const { value, candidate } = yield* router.route(
        admitted.candidates,
        (c) => Effect.flatMap(callFor(admitted, c), adapters.get(c.kind).complete)
      ).pipe(Effect.tapErrorCause((cause) => unservedCall(call, admitted, cause, callSpan)))
      upstreamAnswered(admitted.exchange)
      const finishReasons = finishReasonsOf(value)
      if (usageInBounds(value.usage)) {
        yield* settle(call, id, admitted, { candidate, usage: value.usage, method: "reported", status: "success", errorMessage: null, finishReasons }, callSpan)
        return { ...value, id: admitted.requestId, model: admitted.request.model }
      }
      // The answer carries the usage it was billed for.
      const usage = estimatedUsage(admitted, yield* countTextTokensYielding(completionText(value)))
      yield* settle(
        call,
        id,
        admitted,
        { candidate, usage, method: "estimated", status: "success", errorMessage: UNTRUSTED_USAGE, reportedUsage: value.usage, finishReasons },
        callSpan
      )
      return { ...value, id: admitted.requestId, model: admitted.request.model, usage }
    })

    /**
     * A call of another operation than chat completions (embeddings, messages): `attempt` calls
     * one candidate, routed with failover; settled on the usage the answer reports (with its cache
     * tokens), or on the prompt estimate and the tokens of `emitted` (none: no output tokens, as
     * embeddings) when that is out of bounds. Gives the answer and the usage billed.
     */
    const serveAndSettle = Effect.fnUntraced(function*<A extends Served>(
      admitted: Admitted,
      attempt: (candidate: Candidate, call: UpstreamCall) => Effect.Effect<A, UpstreamError>,
      emitted?: (value: A) => string
    ) {
      const id = timeOrderedUuid()
      const call = track(id, admitted)
      const { value, candidate } = yield* router.route(
        admitted.candidates,
        (c) => Effect.flatMap(callFor(admitted, c), (base) => attempt(c, base))
      ).pipe(Effect.tapErrorCause(() => dropped(call, admitted)))
      if (usageInBounds(value.usage)) {
        yield* settle(call, id, admitted, { candidate, usage: value.usage, method: "reported", status: "success", errorMessage: null, cache: value.cache })
        return { value, usage: value.usage }
      }
      const usage = estimatedUsage(admitted, emitted === undefined ? 0 : yield* countTextTokensYielding(emitted(value)))
      yield* settle(call, id, admitted, { candidate, usage, method: "estimated", status: "success", errorMessage: UNTRUSTED_USAGE, reportedUsage: value.usage })
      return { value, usage }
    })
    /** As `complete`: once sent upstream, the call runs to its answer and is settled even if the client leaves. */
    const serve = <A extends Served>(
      admitted: Admitted,
      attempt: (candidate: Candidate, call: UpstreamCall) => Effect.Effect<A, UpstreamError>,
      emitted?: (value: A) => string
    ): Effect.Effect<{ readonly value: A; readonly usage: Usage }, BadGateway | GatewayTimeout> =>
      Effect.uninterruptible(serveAndSettle(admitted, attempt, emitted))

    /** Non-streaming: route with failover, settle with the reported usage (the gateway's count when it is out of bounds). */
    const complete = (admitted: Admitted): Effect.Effect<ChatCompletion, BadGateway | GatewayTimeout> =>
      // Once sent upstream, a call runs to its answer (each attempt bounded by the upstream
      // timeout) and is settled even if the client has left, since the provider bills it either
      // way: uninterruptible, so a client that leaves interrupts the request once the call is
      // settled. Not forked (hot-path rule "no context copies per call"): a fork copies every
      // FiberRef of the fiber and a join merges them back, the whole context of services included.
      Effect.uninterruptible(
        tracing
          ? Effect.useSpan(callSpanName(admitted), callSpanOptions(admitted), (callSpan) =>
            Effect.withParentSpan(answerAndSettle(admitted, callSpan), callSpan))
          : answerAndSettle(admitted, undefined)
      )

    /**
     * A stream of any shape: `open` opens one candidate's stream, running `onEnd` once it has
     * ended (UpstreamCall.onEnd). Failover happens before the first byte. Whatever ends the
     * stream (completion, drop, client disconnect), what `tally` counted is settled exactly once.
     */
    const openStream = Effect.fnUntraced(function*<A>(
      admitted: Admitted,
      tally: StreamAccount,
      open: (candidate: Candidate, attempt: UpstreamCall, onEnd: StreamEnd) => Effect.Effect<Stream.Stream<A, UpstreamError>, UpstreamError>
    ) {
      const id = timeOrderedUuid()
      const call = track(id, admitted)
      // The model call's span lasts until the stream is settled, past this handler's end.
      const callSpan = tracing ? yield* openCallSpan(admitted) : undefined
      /** What the stream carried so far, settled on the candidate that served it. */
      const settleStream = (candidate: Candidate) =>
        Effect.suspend(() => {
          const outcome = tally.outcome(candidate)
          const settled = settle(call, id, admitted, outcome, callSpan)
          return callSpan === undefined
            ? settled
            : Effect.zipRight(Effect.withParentSpan(settled, callSpan), closeCallSpan(callSpan, endOf(outcome)))
        })
      /** The call ends with no settlement: its span ends with the same exit. */
      const unserved = (exit: Exit.Exit<unknown, unknown>) =>
        callSpan === undefined ? dropped(call, admitted) : Effect.zipRight(dropped(call, admitted), closeCallSpan(callSpan, exit))
      // The attempt in flight: a client that leaves before the first byte, once the request
      // went upstream, is settled as one that leaves mid-stream (interrupted: its prompt, no
      // completion tokens), since the provider has the prompt either way.
      let inFlight: Candidate | undefined
      upstreamStarted(admitted.exchange)
      /** The served attempt's stream ended: settled in the adapter's finalizer (UpstreamCall.onEnd). */
      const ended = (c: Candidate) => (exit: Exit.Exit<unknown, UpstreamError>) =>
        Effect.suspend(() => {
          // A failure is a drop mid-stream; interruption (the client left) and defects are not.
          if (exit._tag === "Failure" && Option.isSome(Cause.failureOption(exit.cause))) tally.noteDrop()
          return settleStream(c)
        })
      const routed = router.route(
        admitted.candidates,
        (c) =>
          Effect.flatMap(callFor(admitted, c), (attempt) => {
            inFlight = c
            return open(c, attempt, ended(c)).pipe(Effect.tapError(() => Effect.sync(() => (inFlight = undefined))))
          })
      )
      const { value: chunks } = yield* (callSpan === undefined ? routed : Effect.withParentSpan(routed, callSpan)).pipe(
        Effect.onInterrupt(() => inFlight === undefined ? unserved(Exit.interrupt(FiberId.none)) : settleStream(inFlight)),
        Effect.tapError((error) => Effect.zipRight(failed(admitted, error, callSpan), unserved(Exit.fail(error))))
      )
      upstreamAnswered(admitted.exchange)
      return chunks
    })

    /**
     * Streaming chat: as openStream, with the adapters' chat chunks; an upstream drop ends the
     * stream with finish_reason stop (and no [DONE]).
     */
    const stream = Effect.fnUntraced(function*(admitted: Admitted) {
      const tally = streamTally(admitted)
      const chunks = yield* openStream(
        admitted,
        tally,
        // Object.assign, not a spread: properties added after a spread cost V8 a new hidden class each (hot-path rule "no hidden class per call")
        (c, attempt, onEnd) => adapters.get(c.kind).stream(Object.assign({}, attempt, { step: tally.relabel, onEnd, onTerminator: tally.noteTerminator }))
      )
      // The drop was noted (and settled) by `ended`, which runs before this handler.
      const body = recoverWith(chunks, (error) => {
        const stop: ChatChunk = {
          id: admitted.requestId,
          object: "chat.completion.chunk",
          created: tally.created(),
          model: admitted.request.model,
          choices: [{ index: 0, delta: {}, finish_reason: "stop" }]
        }
        return Stream.make(stop).pipe(Stream.tap(() => Effect.logWarning(`upstream dropped mid-stream: ${error.message}`)))
      })
      return { chunks: body, dropped: tally.dropped, terminated: tally.terminated }
    })

    return { isAgentModel, admit, admitTurn, complete, stream, openStream, serve, settle } as const
  })
}) {}
