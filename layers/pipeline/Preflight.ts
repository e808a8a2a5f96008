// Preflight: the five pre-flight checks as small functions over the admission snapshot and the
// caller, in the spec's order: model (404/403, prompt size 422), rate limit (429), suspension
// (402 budget_suspended), budget (402 budget_exhausted), platform wallet (402 wallet_insufficient).
// Pure where they can be (Either); the clock's time, the configured prompt size and the effectful
// calls (the rate limiter, the locked budget read of a due period reset) are passed in. Inference
// runs them in order, each in a span when tracing is on; none reaches an upstream or moves money.
import { BigDecimal, type Context, Effect, Either } from "effect"
import type { ChatRequest } from "../../schemas/Chat.js"
import type { PlatformSettings } from "../../schemas/Platforms.js"
import { Forbidden, NotFound, PaymentRequired, ValidationError } from "../../schemas/Errors.js"
import { dec, perMillion } from "../lib/Money.js"
import { currentPeriodStart } from "../lib/Periods.js"
import type { EndUserPrincipal, PlatformPrincipal } from "../access/KeyAuth.js"
import type { BudgetRow } from "../ledger/BudgetLedger.js"
import { displayExhausted } from "../ledger/DisplayLedger.js"
import { resolveLimits } from "../tenancy/RateLimitSettings.js"
import type { AdmissionSnapshot } from "./AdmissionSnapshot.js"
import type { Candidate } from "./ProviderRouter.js"
import type { RateLimiter, RateLimitExceeded, RateLimits, RateLimitState } from "./RateLimiter.js"
import { refusedPart } from "./upstream/Support.js"

export type Caller = PlatformPrincipal | EndUserPrincipal
/**
 * A model call's kind, its log row's request_type: `agent` is a Responses API call of an agent
 * model, `messages` a Messages API (Anthropic) call.
 */
export type RequestType = "chat.completion" | "response" | "agent" | "embedding" | "messages"

export type WalletSettings = NonNullable<PlatformSettings["end_user_wallet"]>
export type PreflightError = Forbidden | NotFound | ValidationError | RateLimitExceeded | PaymentRequired

/** Cap assumed for the estimate when the request sets no max_tokens. */
export const DEFAULT_MAX_TOKENS = 4096

const ZERO = BigDecimal.make(0n, 0)
const NO_LIMITS: RateLimits = { rpm: null, tpm: null, rpd: null }

const maxBy = (values: ReadonlyArray<BigDecimal.BigDecimal>) =>
  values.reduce((a, b) => BigDecimal.max(a, b), ZERO)

/**
 * Check 1: the model exists for this platform, serves the request's operation (chat or
 * embeddings), the key may do inference, the prompt is within GATEWAY_MAX_PROMPT_CHARS (`chars`,
 * its length, read before anything is counted), and every candidate upstream takes the
 * request's content parts (upstream/Support.ts); gives max_tokens (0 for embeddings, which
 * produce no output tokens).
 */
export const checkModel = (
  caller: Caller,
  request: ChatRequest,
  candidates: ReadonlyArray<Candidate>,
  chars: number,
  requestType: RequestType,
  maxPromptChars: number
): Either.Either<number | undefined, Forbidden | NotFound | ValidationError> => {
  if (!caller.scopes.includes("inference")) {
    return Either.left(new Forbidden({ code: "insufficient_scope", message: "This key lacks the inference scope" }))
  }
  if (candidates.length === 0) {
    return Either.left(new NotFound({ code: "model_not_found", param: "model", message: `The model '${request.model}' does not exist or is not enabled` }))
  }
  const operation = requestType === "embedding" ? "embeddings" : "chat"
  if (!candidates[0]!.serves.includes(operation)) {
    return Either.left(new ValidationError({
      code: "model_not_supported",
      param: "model",
      message: `The model '${request.model}' serves ${candidates[0]!.serves.join(" and ")}, not ${operation}`
    }))
  }
  if (chars > maxPromptChars) {
    const field = requestType === "chat.completion" || requestType === "messages" ? "messages" : "input"
    return Either.left(new ValidationError({
      code: "context_length_exceeded",
      param: field,
      message: `The ${field}${request.tools !== undefined && request.tools.length > 0 ? " and tools" : ""} hold ${chars} characters of text; this gateway accepts at most ${maxPromptChars} per request`
    }))
  }
  const refused = refusedPart(request, candidates, requestType === "messages")
  if (refused !== undefined) {
    return Either.left(new ValidationError({
      code: "unsupported_content",
      param: refused.param,
      message: `${refused.param}: this model does not accept ${refused.what}`
    }))
  }
  if (requestType === "embedding") return Either.right(0)
  const maxTokens = request.max_tokens ?? request.max_completion_tokens
  if (maxTokens !== undefined && maxTokens < 16 && candidates.some((c) => c.kind === "openai-responses")) {
    return Either.left(new ValidationError({
      code: "max_tokens_too_small",
      param: "max_tokens",
      message: "max_tokens must be at least 16 for this model"
    }))
  }
  return Either.right(maxTokens)
}

export interface RateLimitAdmission {
  readonly limits: RateLimits
  readonly rateLimit: RateLimitState | null
}

const unlimited = Effect.succeed<RateLimitAdmission>({ limits: NO_LIMITS, rateLimit: null })

/**
 * Check 2: the end user's limits (their override, else the platform default, else none), admitted
 * by the limiter. A refusal stays RateLimitExceeded: the handler turns it into 429 + retry-after.
 * Platform keys are not rate-limited.
 */
export const checkRateLimit = (
  caller: Caller,
  snapshot: AdmissionSnapshot,
  promptEstimate: number,
  limiter: Context.Tag.Service<RateLimiter>
): Effect.Effect<RateLimitAdmission, RateLimitExceeded> => {
  if (caller._tag !== "EndUserKey") return unlimited
  const effective = resolveLimits(snapshot.override, snapshot.settings.default_rate_limits)
  const limits: RateLimits = { rpm: effective.rpm_limit, tpm: effective.tpm_limit, rpd: effective.rpd_limit }
  return Effect.map(limiter.admit(caller.endUserId, limits, promptEstimate), (rateLimit) => ({ limits, rateLimit }))
}

/** Whether a period boundary passed since the budget row's period started (a reset is due). */
const periodDue = (row: BudgetRow, now: number): boolean =>
  currentPeriodStart(row.period, row.period_anchor, new Date(now)).getTime() > row.period_start.getTime()

/** The live budget, refused when active and suspended. */
export const notSuspended = (live: BudgetRow | null): Either.Either<BudgetRow | null, PaymentRequired> =>
  live?.is_active === true && live.is_suspended
    ? Either.left(new PaymentRequired({ code: "budget_suspended", param: "budget", message: "The budget is suspended" }))
    : Either.right(live)

/**
 * Check 3: the live, active budget (after a due period reset) is not suspended. Gives the live
 * budget (active or not; null: none). `now` is the clock's time in milliseconds; `liveBudget`
 * reads the budget on the locked path that resets a due period first (rare).
 */
export const checkSuspension = (
  caller: Caller,
  snapshot: AdmissionSnapshot,
  now: number,
  liveBudget: (platformId: string, endUserId: string) => Effect.Effect<BudgetRow | null>
): Effect.Effect<BudgetRow | null, PaymentRequired> => {
  const row = snapshot.budget
  if (caller._tag !== "EndUserKey" || row === null) return notSuspended(null)
  if (periodDue(row, now)) return Effect.flatMap(liveBudget(caller.platformId, caller.endUserId), notSuspended)
  return notSuspended(row)
}

/**
 * Check 4: remaining > 0 on the USD ledger (open capability holds count), then on the display
 * ledger. `budget` is the live budget when active, else null (no budget: nothing to check).
 */
export const checkBudget = (budget: BudgetRow | null, snapshot: AdmissionSnapshot): Either.Either<void, PaymentRequired> =>
  budget === null ? Either.void : budgetRemains(budget, snapshot.held, snapshot.settings.end_user_wallet ?? null)

/**
 * Check 4 on a live, active budget: remaining > 0 on the USD ledger once `held` (open capability
 * holds, queued costs) is subtracted, then on the display ledger. Shared by model calls and paid
 * tool calls.
 */
export const budgetRemains = (
  budget: BudgetRow,
  held: BigDecimal.BigDecimal,
  display: WalletSettings | null
): Either.Either<void, PaymentRequired> => {
  const remaining = BigDecimal.subtract(BigDecimal.subtract(dec(budget.max_usd), dec(budget.used_usd)), held)
  if (BigDecimal.lessThanOrEqualTo(remaining, ZERO)) {
    return Either.left(budgetExhausted())
  }
  if (displayExhausted(budget, display)) {
    return Either.left(new PaymentRequired({ code: "budget_exhausted", param: "display_ledger", message: "The display balance is exhausted" }))
  }
  return Either.void
}

/**
 * Whether checks 3 or 4 refuse the call whatever its prompt's size, and check 2 does not need
 * the size to decide (no tokens-per-minute limit): then the prompt need not be counted to give
 * the answer the checks in order give. Reads the snapshot only; a period boundary that passed
 * (check 3 resets it first) answers no.
 */
export const refusedWhateverTheSize = (caller: Caller, snapshot: AdmissionSnapshot, now: number): boolean => {
  const row = snapshot.budget
  if (caller._tag !== "EndUserKey" || row === null || !row.is_active) return false
  if (resolveLimits(snapshot.override, snapshot.settings.default_rate_limits).tpm_limit !== null) return false
  if (periodDue(row, now)) return false
  // In reserve mode the snapshot's budget numbers decide nothing: the reservation does.
  return row.is_suspended || (!reservesBudget(snapshot.settings) && Either.isLeft(checkBudget(row, snapshot)))
}

/**
 * The most a call can cost: its prompt estimate at the dearest input price and its max tokens
 * (DEFAULT_MAX_TOKENS when unset) at the dearest output price among the candidates.
 */
export const maxCostEstimate = (
  candidates: ReadonlyArray<Candidate>,
  promptEstimate: number,
  maxTokens: number | undefined
): BigDecimal.BigDecimal =>
  BigDecimal.sum(
    perMillion(promptEstimate, maxBy(candidates.map((c) => c.inputUsdPerMtok))),
    perMillion(maxTokens ?? DEFAULT_MAX_TOKENS, maxBy(candidates.map((c) => c.outputUsdPerMtok)))
  )

/** Check 5: the platform wallet covers the estimate (priced at the dearest candidate). */
export const checkWallet = (
  snapshot: AdmissionSnapshot,
  promptEstimate: number,
  maxTokens: number | undefined
): Either.Either<void, PaymentRequired> =>
  walletCovers(snapshot.walletBalance, maxCostEstimate(snapshot.candidates, promptEstimate, maxTokens), "estimated cost")

/**
 * Whether the platform reserves each call's maximum cost at admission (budget_enforcement
 * "reserve"): then the reservation statement is checks 4 (USD ledger) and 5.
 */
export const reservesBudget = (settings: PlatformSettings): boolean => settings.budget_enforcement === "reserve"

/** Check 4's display-ledger half, for reserve mode (the reservation checks the USD ledger). */
export const checkDisplay = (budget: BudgetRow | null, snapshot: AdmissionSnapshot): Either.Either<void, PaymentRequired> =>
  budget !== null && displayExhausted(budget, snapshot.settings.end_user_wallet ?? null)
    ? Either.left(new PaymentRequired({ code: "budget_exhausted", param: "display_ledger", message: "The display balance is exhausted" }))
    : Either.void

/** Check 4's refusal on the USD ledger. */
export const budgetExhausted = (): PaymentRequired =>
  new PaymentRequired({ code: "budget_exhausted", param: "usd_ledger", message: "The USD budget is exhausted" })

/** Check 5 on an amount: the wallet's balance covers it (`what` names the amount in the message). */
export const walletCovers = (
  balance: BigDecimal.BigDecimal,
  amount: BigDecimal.BigDecimal,
  what: string
): Either.Either<void, PaymentRequired> =>
  BigDecimal.lessThan(balance, amount) ? Either.left(walletRefusal(amount, what)) : Either.void

/** Check 5's refusal: the wallet cannot cover `amount`. */
export const walletRefusal = (amount: BigDecimal.BigDecimal, what: string): PaymentRequired =>
  new PaymentRequired({
    code: "wallet_insufficient",
    param: "platform_wallet",
    message: `The platform wallet cannot cover the ${what} (${BigDecimal.format(amount)} USD)`
  })
