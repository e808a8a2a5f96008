// The five pre-flight checks as the real Inference runs them, with every layer behind them
// swapped: the admission snapshot from AdmissionCache.test (no database), the limiter, the budget
// ledger's locked read and the settlement queue as stubs, and an upstream that only counts its
// calls (no HTTP). One case per check, the order between them, and an admitted call that reaches
// the upstream once. No refusal may reach the upstream, and no check may run past the first refusal.
import { describe, expect, it } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { BigDecimal, ConfigProvider, Effect, Layer, Stream, TestClock } from "effect"
import type { ChatCompletion, ChatRequest } from "../../schemas/Chat.js"
import type { PlatformSettings } from "../../schemas/Platforms.js"
import type { EndUserPrincipal, PlatformPrincipal } from "../../layers/access/KeyAuth.js"
import { BudgetLedger, type BudgetRow } from "../../layers/ledger/BudgetLedger.js"
import type { Settlement } from "../../layers/ledger/Settlement.js"
import { CallRecords } from "../../layers/ledger/CallRecords.js"
import { type ReserveResult, Reservations } from "../../layers/ledger/Reservations.js"
import { Settlements } from "../../layers/ledger/Settlements.js"
import { dec } from "../../layers/lib/Money.js"
import { stubService } from "../../layers/lib/Stubs.js"
import { AdmissionCache } from "../../layers/pipeline/AdmissionCache.js"
import type { AdmissionSnapshot } from "../../layers/pipeline/AdmissionSnapshot.js"
import { type Caller, Inference, type RequestType } from "../../layers/pipeline/Inference.js"
import { type Candidate, ProviderRouter } from "../../layers/pipeline/ProviderRouter.js"
import { RateLimiter, RateLimitExceeded, type RateLimits } from "../../layers/pipeline/RateLimiter.js"
import { UpstreamAdapters } from "../../layers/pipeline/upstream/Adapters.js"
import type { UpstreamCall } from "../../layers/pipeline/upstream/Upstream.js"
import { ProviderKeys } from "../../layers/tenancy/ProviderKeys.js"

const MAX_PROMPT_CHARS = 20_000
const DAY_MS = 86_400_000

const endUser: EndUserPrincipal = { _tag: "EndUserKey", keyId: "key-u", platformId: "plat", endUserId: "user", scopes: ["inference"] }
const platformKey: PlatformPrincipal = { _tag: "PlatformKey", keyId: "key-p", platformId: "plat", scopes: ["inference"] }
const noScope: EndUserPrincipal = { ...endUser, scopes: [] }

const candidate = (over: Partial<Candidate> = {}): Candidate => ({
  modelId: "model-1",
  modelSlug: "stub/model",
  serves: ["chat"],
  agent: false,
  providerId: "provider-1",
  providerSlug: "stub",
  kind: "openai",
  baseUrl: "http://upstream.invalid/v1",
  providerModelId: "stub-model",
  priority: 0,
  weight: 1,
  apiKey: "sk-stub",
  inputUsdPerMtok: dec("1"),
  outputUsdPerMtok: dec("2"),
  ...over
})

const budget = (over: Partial<BudgetRow> = {}): BudgetRow => ({
  id: "budget-1",
  platform_id: "plat",
  end_user_id: "user",
  max_usd: "10",
  used_usd: "0",
  period: "daily",
  period_start: new Date(0),
  period_anchor: new Date(0),
  auto_replenish: false,
  replenish_amount: null,
  low_balance_threshold: null,
  low_balance_armed: false,
  is_active: true,
  is_suspended: false,
  max_display: null,
  used_display: "0",
  created_at: new Date(0),
  updated_at: new Date(0),
  ...over
})

/** A platform whose every check passes: one candidate, a budget with room, a wallet with money. */
const snapshotOf = (over: Partial<AdmissionSnapshot> = {}): AdmissionSnapshot => ({
  candidates: [candidate()],
  settings: {},
  override: null,
  budget: budget(),
  held: dec("0"),
  walletBalance: dec("100"),
  committed: new Set(),
  ...over
})
const rpmOnly = { rpm: 5, tpm: null, rpd: null }
const emptyWallet = { walletBalance: dec("0") }
const suspended = { is_suspended: true }
const spent = { used_usd: "10" }

const request = (content = "hello", over: Partial<ChatRequest> = {}): ChatRequest => ({
  model: "stub/model",
  messages: [{ role: "user", content }],
  ...over
})

const completion: ChatCompletion = {
  id: "upstream-id",
  object: "chat.completion",
  created: 1,
  model: "stub-model",
  choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }],
  usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 }
}

interface World {
  readonly snapshot: AdmissionSnapshot
  /** The limiter's answer (admits by default). */
  readonly refuse?: RateLimitExceeded["limit"]
  /** What the ledger's locked read answers after a due period reset. */
  readonly afterReset?: BudgetRow
  /** What a reservation answers (budget_enforcement "reserve"); reserved by default. */
  readonly reserve?: ReserveResult
}

/** Inference over stubs, with what each stub saw. */
const worldOf = (world: World) => {
  const seen = {
    upstream: [] as Array<UpstreamCall>,
    admissions: [] as Array<{ readonly subject: string; readonly limits: RateLimits; readonly tokens: number }>,
    ledgerReads: 0,
    settled: [] as Array<Settlement>,
    reservations: [] as Array<{ readonly budgetId: string | null; readonly amount: string }>
  }
  const limiter = RateLimiter.test((subject, limits, tokens) => {
    seen.admissions.push({ subject, limits, tokens })
    if (world.refuse === undefined) return Effect.succeed({ limitRequests: null, remainingRequests: null, resetRequestsMs: null, limitTokens: null, remainingTokens: null, resetTokensMs: null })
    const state = { limitRequests: 5, remainingRequests: 0, resetRequestsMs: 1_000, limitTokens: null, remainingTokens: null, resetTokensMs: null }
    return Effect.fail(new RateLimitExceeded({ limit: world.refuse, retryAfterMs: 1_000, state }))
  })
  const upstream = UpstreamAdapters.test({
    complete: (call) => Effect.sync(() => (seen.upstream.push(call), completion)),
    stream: (call) => Effect.sync(() => (seen.upstream.push(call), Stream.empty))
  })
  const ledger = Layer.succeed(
    BudgetLedger,
    stubService<BudgetLedger>("BudgetLedger", {
      get: () =>
        Effect.suspend(() => {
          seen.ledgerReads++
          return world.afterReset === undefined ? Effect.dieMessage("no period reset expected") : Effect.succeed(world.afterReset)
        })
    })
  )
  const layer = Inference.DefaultWithoutDependencies.pipe(
    Layer.provide(Layer.mergeAll(
      AdmissionCache.test(() => world.snapshot),
      Settlements.test(seen.settled),
      CallRecords.test(),
      Reservations.test({
        reserve: (_platformId, budgetId, amount) =>
          Effect.sync(() => {
            seen.reservations.push({ budgetId, amount: BigDecimal.format(amount) })
            return world.reserve ?? { _tag: "Reserved", id: "reservation-1" }
          })
      }),
      limiter,
      upstream,
      ledger,
      ProviderRouter.Default,
      // Read only on a cache miss, which AdmissionCache.test never has.
      Layer.succeed(PgClient.PgClient, stubService<PgClient.PgClient>("PgClient", {})),
      Layer.succeed(ProviderKeys, stubService<ProviderKeys>("ProviderKeys", {}))
    )),
    Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["GATEWAY_MAX_PROMPT_CHARS", String(MAX_PROMPT_CHARS)]]))))
  )
  return { layer, seen }
}

/** Admission then the answer, as the chat route runs them: the error of a refused call. */
const refusal = (world: World, caller: Caller = endUser, req: ChatRequest = request(), requestType?: RequestType) => {
  const { layer, seen } = worldOf(world)
  return Effect.gen(function*() {
    const inference = yield* Inference
    const error = yield* Effect.flip(Effect.flatMap(inference.admit(caller, req, requestType), inference.complete))
    expect(seen.upstream).toHaveLength(0)
    expect(seen.settled).toHaveLength(0)
    return { error, seen }
  }).pipe(Effect.provide(layer))
}

describe.each([true, false])("pre-flight (tracing %s)", (tracing) => {
  const test = <E>(name: string, body: () => Effect.Effect<void, E>) => it.effect(name, () => Effect.withTracerEnabled(body(), tracing))

  test("an admitted call reaches the upstream once and is settled once", () => {
    const { layer, seen } = worldOf({ snapshot: snapshotOf({ override: rpmOnly }) })
    return Effect.gen(function*() {
      const inference = yield* Inference
      const answer = yield* Effect.flatMap(inference.admit(endUser, request()), inference.complete)
      expect(answer.model).toBe("stub/model")
      expect(answer.id).toMatch(/^chatcmpl-/)
      expect(seen.upstream).toHaveLength(1)
      expect(seen.upstream[0]).toMatchObject({ baseUrl: "http://upstream.invalid/v1", apiKey: "sk-stub", providerModelId: "stub-model" })
      expect(seen.admissions).toEqual([{ subject: "user", limits: rpmOnly, tokens: expect.any(Number) }])
      expect(seen.settled).toHaveLength(1)
      expect(seen.settled[0]).toMatchObject({ platformId: "plat", endUserId: "user", budget: { id: "budget-1" } })
    }).pipe(Effect.provide(layer))
  })

  // Check 1: scope, model, prompt size, the openai-responses max_tokens minimum.
  test("a key without the inference scope: 403 insufficient_scope", () =>
    Effect.gen(function*() {
      const { error, seen } = yield* refusal({ snapshot: snapshotOf() }, noScope)
      expect(error).toMatchObject({ _tag: "Forbidden", code: "insufficient_scope" })
      expect(seen.admissions).toHaveLength(0)
    }))

  test("a model without candidates: 404 model_not_found on model", () =>
    Effect.gen(function*() {
      const { error } = yield* refusal({ snapshot: snapshotOf({ candidates: [] }) })
      expect(error).toMatchObject({ _tag: "NotFound", code: "model_not_found", param: "model", message: "The model 'stub/model' does not exist or is not enabled" })
    }))

  test("a prompt over GATEWAY_MAX_PROMPT_CHARS: 422 context_length_exceeded on messages, or input for responses", () =>
    Effect.gen(function*() {
      const long = request("x".repeat(MAX_PROMPT_CHARS + 1))
      const chat = yield* refusal({ snapshot: snapshotOf() }, endUser, long)
      expect(chat.error).toMatchObject({
        _tag: "ValidationError",
        code: "context_length_exceeded",
        param: "messages",
        message: `The messages hold ${MAX_PROMPT_CHARS + 1} characters of text; this gateway accepts at most ${MAX_PROMPT_CHARS} per request`
      })
      const responses = yield* refusal({ snapshot: snapshotOf() }, endUser, long, "response")
      expect(responses.error).toMatchObject({ code: "context_length_exceeded", param: "input" })
      expect(chat.seen.admissions).toHaveLength(0)
    }))

  test("max_tokens under 16 with an openai-responses candidate: 422 max_tokens_too_small", () =>
    Effect.gen(function*() {
      const snapshot = snapshotOf({ candidates: [candidate(), candidate({ kind: "openai-responses" })] })
      const { error } = yield* refusal({ snapshot }, endUser, request("hello", { max_tokens: 15 }))
      expect(error).toMatchObject({ _tag: "ValidationError", code: "max_tokens_too_small", param: "max_tokens" })
    }))

  // Check 2.
  test("the limiter refuses: RateLimitExceeded (429), with the user's override as limits", () =>
    Effect.gen(function*() {
      const { error, seen } = yield* refusal({ snapshot: snapshotOf({ override: rpmOnly }), refuse: "rpm" })
      expect(error).toMatchObject({ _tag: "RateLimitExceeded", limit: "rpm", retryAfterMs: 1_000 })
      expect(seen.admissions).toEqual([{ subject: "user", limits: rpmOnly, tokens: expect.any(Number) }])
    }))

  test("without an override the platform's default limits apply; platform keys are not rate-limited", () =>
    Effect.gen(function*() {
      const settings: PlatformSettings = { default_rate_limits: { rpm_limit: 7, tpm_limit: null, rpd_limit: 100 } }
      const { error, seen } = yield* refusal({ snapshot: snapshotOf({ settings }), refuse: "rpd" })
      expect(error).toMatchObject({ _tag: "RateLimitExceeded", limit: "rpd" })
      expect(seen.admissions[0]?.limits).toEqual({ rpm: 7, tpm: null, rpd: 100 })
      const { layer, seen: platformSeen } = worldOf({ snapshot: snapshotOf({ settings, budget: null }), refuse: "rpm" })
      yield* Effect.flatMap(Inference, (inference) => Effect.flatMap(inference.admit(platformKey, request()), inference.complete)).pipe(Effect.provide(layer))
      expect(platformSeen.admissions).toHaveLength(0)
      expect(platformSeen.upstream).toHaveLength(1)
    }))

  // Check 3.
  test("a suspended budget: 402 budget_suspended on budget", () =>
    Effect.gen(function*() {
      const { error } = yield* refusal({ snapshot: snapshotOf({ budget: budget(suspended) }) })
      expect(error).toMatchObject({ _tag: "PaymentRequired", code: "budget_suspended", param: "budget", message: "The budget is suspended" })
    }))

  test("a due period reset takes the ledger's locked read, and its answer decides", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(2 * DAY_MS)
      const stale = snapshotOf({ budget: budget({ ...suspended, ...spent }) })
      const { layer, seen } = worldOf({ snapshot: stale, afterReset: budget({ period_start: new Date(2 * DAY_MS) }) })
      yield* Effect.flatMap(Inference, (inference) => Effect.flatMap(inference.admit(endUser, request()), inference.complete)).pipe(Effect.provide(layer))
      expect(seen.ledgerReads).toBe(1)
      expect(seen.upstream).toHaveLength(1)
      const refused = yield* refusal({ snapshot: stale, afterReset: budget({ ...suspended, period_start: new Date(2 * DAY_MS) }) })
      expect(refused.error).toMatchObject({ code: "budget_suspended" })
      expect(refused.seen.ledgerReads).toBe(1)
    }))

  // Check 4.
  test("a spent budget: 402 budget_exhausted on usd_ledger; open holds count", () =>
    Effect.gen(function*() {
      const { error } = yield* refusal({ snapshot: snapshotOf({ budget: budget(spent) }) })
      expect(error).toMatchObject({ _tag: "PaymentRequired", code: "budget_exhausted", param: "usd_ledger", message: "The USD budget is exhausted" })
      const held = yield* refusal({ snapshot: snapshotOf({ budget: budget({ used_usd: "6" }), held: dec("4") }) })
      expect(held.error).toMatchObject({ code: "budget_exhausted", param: "usd_ledger" })
    }))

  test("a spent display balance of an enabled display wallet: 402 budget_exhausted on display_ledger", () =>
    Effect.gen(function*() {
      const snapshot = snapshotOf({
        settings: { end_user_wallet: { enabled: true } },
        budget: budget({ max_display: "50", used_display: "50" })
      })
      const { error } = yield* refusal({ snapshot })
      expect(error).toMatchObject({ code: "budget_exhausted", param: "display_ledger", message: "The display balance is exhausted" })
    }))

  // Check 5.
  test("a wallet short of the estimate at the dearest candidate: 402 wallet_insufficient", () =>
    Effect.gen(function*() {
      // 1000 max tokens at 2 USD per million output tokens is 0.002, above the wallet's 0.001.
      const snapshot = snapshotOf({ walletBalance: dec("0.001"), candidates: [candidate({ outputUsdPerMtok: dec("0.5") }), candidate()] })
      const { error } = yield* refusal({ snapshot }, endUser, request("", { max_tokens: 1000 }))
      expect(error).toMatchObject({ _tag: "PaymentRequired", code: "wallet_insufficient", param: "platform_wallet" })
      expect((error as { message: string }).message).toMatch(/^The platform wallet cannot cover the estimated cost \(0\.002\d* USD\)$/)
    }))

  // Checks 4 and 5 in reserve mode (budget_enforcement "reserve"): the reservation decides.
  const reserving: PlatformSettings = { budget_enforcement: "reserve" }

  test("reserve: the call's maximum cost is reserved on the live budget, past the snapshot's numbers; its settlement names the reservation", () => {
    const { layer, seen } = worldOf({ snapshot: snapshotOf({ settings: reserving, budget: budget(spent), ...emptyWallet }) })
    return Effect.gen(function*() {
      const inference = yield* Inference
      yield* Effect.flatMap(inference.admit(endUser, request("hello", { max_tokens: 1000 })), inference.complete)
      // 1000 max tokens at 2 USD per million output tokens, plus the prompt at 1 USD per million.
      expect(seen.reservations).toEqual([{ budgetId: "budget-1", amount: expect.stringMatching(/^0\.002\d+$/) }])
      expect(seen.upstream).toHaveLength(1)
      expect(seen.settled[0]).toMatchObject({ reservationId: "reservation-1" })
    }).pipe(Effect.provide(layer))
  })

  test("reserve: a refused reservation is 402 budget_exhausted or wallet_insufficient; a platform key reserves on the wallet alone", () =>
    Effect.gen(function*() {
      const exhausted = yield* refusal({ snapshot: snapshotOf({ settings: reserving }), reserve: { _tag: "Refused", code: "budget_exhausted" } })
      expect(exhausted.error).toMatchObject({ _tag: "PaymentRequired", code: "budget_exhausted", param: "usd_ledger" })
      const wallet = yield* refusal(
        { snapshot: snapshotOf({ settings: reserving, budget: null }), reserve: { _tag: "Refused", code: "wallet_insufficient" } },
        platformKey
      )
      expect(wallet.error).toMatchObject({ _tag: "PaymentRequired", code: "wallet_insufficient", param: "platform_wallet" })
      expect(wallet.seen.reservations).toEqual([{ budgetId: null, amount: expect.any(String) }])
    }))

  test("reserve: a suspended budget is refused before anything is reserved", () =>
    Effect.gen(function*() {
      const { error, seen } = yield* refusal({ snapshot: snapshotOf({ settings: reserving, budget: budget(suspended) }) })
      expect(error).toMatchObject({ code: "budget_suspended" })
      expect(seen.reservations).toHaveLength(0)
    }))

  test("optimistic (the default) reserves nothing", () => {
    const { layer, seen } = worldOf({ snapshot: snapshotOf({ settings: { budget_enforcement: "optimistic" } }) })
    return Effect.gen(function*() {
      const inference = yield* Inference
      yield* Effect.flatMap(inference.admit(endUser, request()), inference.complete)
      expect(seen.reservations).toHaveLength(0)
      expect(seen.settled[0]?.reservationId).toBeUndefined()
    }).pipe(Effect.provide(layer))
  })

  // The order between them.
  test("model missing and everything else bad: 404, and no later check runs", () =>
    Effect.gen(function*() {
      const snapshot = snapshotOf({ candidates: [], override: rpmOnly, budget: budget({ ...suspended, ...spent }), ...emptyWallet })
      const { error, seen } = yield* refusal({ snapshot, refuse: "rpm" })
      expect(error).toMatchObject({ code: "model_not_found" })
      expect(seen.admissions).toHaveLength(0)
    }))

  test("no scope before a missing model: 403", () =>
    Effect.gen(function*() {
      const { error } = yield* refusal({ snapshot: snapshotOf({ candidates: [] }) }, noScope)
      expect(error).toMatchObject({ code: "insufficient_scope" })
    }))

  test("rate-limited and suspended: 429 first", () =>
    Effect.gen(function*() {
      const { error } = yield* refusal({ snapshot: snapshotOf({ override: rpmOnly, budget: budget({ ...suspended, ...spent }), ...emptyWallet }), refuse: "rpm" })
      expect(error).toMatchObject({ _tag: "RateLimitExceeded" })
    }))

  test("suspended, over budget and an empty wallet: budget_suspended", () =>
    Effect.gen(function*() {
      const { error, seen } = yield* refusal({ snapshot: snapshotOf({ budget: budget({ ...suspended, ...spent }), ...emptyWallet }) })
      expect(error).toMatchObject({ code: "budget_suspended" })
      expect(seen.admissions).toHaveLength(1)
    }))

  test("over budget and an empty wallet: budget_exhausted", () =>
    Effect.gen(function*() {
      const { error } = yield* refusal({ snapshot: snapshotOf({ budget: budget(spent), ...emptyWallet }) })
      expect(error).toMatchObject({ code: "budget_exhausted" })
    }))

  test("an inactive budget is no budget: suspended and spent, the wallet alone decides", () =>
    Effect.gen(function*() {
      const inactive = budget({ ...suspended, ...spent, is_active: false })
      const { error } = yield* refusal({ snapshot: snapshotOf({ budget: inactive, ...emptyWallet }) })
      expect(error).toMatchObject({ code: "wallet_insufficient" })
      const { layer, seen } = worldOf({ snapshot: snapshotOf({ budget: inactive }) })
      yield* Effect.flatMap(Inference, (inference) => Effect.flatMap(inference.admit(endUser, request()), inference.complete)).pipe(Effect.provide(layer))
      expect(seen.upstream).toHaveLength(1)
      // An inactive budget is not debited: the settlement names no budget.
      expect(seen.settled[0]?.budget).toBeUndefined()
    }))

  test("a large prompt refused whatever its size is not counted, and the order holds", () =>
    Effect.gen(function*() {
      const large = request("word ".repeat(3_000))
      const { error, seen } = yield* refusal({ snapshot: snapshotOf({ budget: budget(suspended), override: rpmOnly }) }, endUser, large)
      expect(error).toMatchObject({ code: "budget_suspended" })
      expect(seen.admissions).toEqual([{ subject: "user", limits: rpmOnly, tokens: 0 }])
      // With a tokens-per-minute limit the count is needed: it is made, and the limiter sees it.
      const tpm = { rpm: null, tpm: 1_000_000, rpd: null }
      const counted = yield* refusal({ snapshot: snapshotOf({ budget: budget(suspended), override: tpm }) }, endUser, large)
      expect(counted.error).toMatchObject({ code: "budget_suspended" })
      expect(counted.seen.admissions[0]?.tokens).toBeGreaterThan(1_000)
    }))
})
