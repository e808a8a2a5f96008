// ProviderRouter: the routing order of a model's candidates (enabled configs whose provider has
// an active key for the platform, read with the admission snapshot): priority, then weighted
// random within a priority; and the failover loop: the next candidate on connect errors,
// timeouts, 429 and 5xx. Each failed attempt is logged with the provider's redacted text; the
// client only ever hears the gateway's generic wording.
import { BigDecimal, Effect } from "effect"
import { BadGateway, GatewayTimeout } from "../../schemas/Errors.js"
import { logUpstreamFailure } from "./upstream/FailureLog.js"
import type { ModelOperation } from "../../schemas/Catalog.js"
import { genAiProvider, type ProviderKind, type UpstreamError } from "./upstream/Upstream.js"
import { callSpans, tracingEnabled } from "../lib/CurrentSpan.js"

export interface Candidate {
  readonly modelId: string
  /** The model's slug (the request may name it by an alias). */
  readonly modelSlug: string
  /** What the model serves (the same on each of its candidates). */
  readonly serves: ReadonlyArray<ModelOperation>
  /** Whether the model is an agent model (the same on each of its candidates). */
  readonly agent: boolean
  readonly providerId: string
  readonly providerSlug: string
  readonly kind: ProviderKind
  readonly baseUrl: string
  readonly providerModelId: string
  readonly priority: number
  readonly weight: number
  readonly apiKey: string
  readonly inputUsdPerMtok: BigDecimal.BigDecimal
  readonly outputUsdPerMtok: BigDecimal.BigDecimal
  /** Prompt tokens read from / written to the provider's prompt cache; null or absent: the input price. */
  readonly cacheReadUsdPerMtok?: BigDecimal.BigDecimal | null | undefined
  readonly cacheWriteUsdPerMtok?: BigDecimal.BigDecimal | null | undefined
}

/** Lowest priority value first; within a priority, a weighted random order. */
export const orderCandidates = <C extends { readonly priority: number; readonly weight: number }>(
  candidates: ReadonlyArray<C>,
  random: () => number = Math.random
): Array<C> => {
  const byPriority = new Map<number, Array<C>>()
  for (const c of candidates) byPriority.set(c.priority, [...(byPriority.get(c.priority) ?? []), c])
  const ordered: Array<C> = []
  for (const priority of [...byPriority.keys()].sort((a, b) => a - b)) {
    const pool = [...byPriority.get(priority)!]
    while (pool.length > 0) {
      const total = pool.reduce((s, c) => s + Math.max(c.weight, 0), 0)
      let pick = 0
      if (total > 0) {
        let r = random() * total
        pick = pool.findIndex((c) => (r -= Math.max(c.weight, 0)) < 0)
        if (pick < 0) pick = pool.length - 1
      }
      ordered.push(pool.splice(pick, 1)[0]!)
    }
  }
  return ordered
}

/**
 * The 502 or 504 message: what kind of failure, and the provider's status, in the gateway's words.
 * Never the provider's text (an upstream may echo the credentials it was sent) nor its address.
 */
export const upstreamFailureMessage = (error: UpstreamError | undefined): string => {
  switch (error?.kind) {
    case undefined:
      return "No upstream provider could serve the request"
    case "status":
      return error.status === undefined ? "The upstream provider reported an error" : `The upstream provider answered ${error.status}`
    case "connect":
      return "The upstream provider could not be reached or dropped the connection"
    case "protocol":
      return "The upstream provider sent an answer the gateway could not use"
    case "timeout":
      return "The upstream did not answer in time"
    case "unsupported":
      return "No upstream provider of this model can serve this operation"
  }
}

export class ProviderRouter extends Effect.Service<ProviderRouter>()("gateway/ProviderRouter", {
  effect: Effect.gen(function*() {
    // Attempt spans only when this instance makes spans (see Inference).
    const span = callSpans(yield* tracingEnabled)
    /**
     * Tries `attempt` on each candidate in routing order until one succeeds; a non-retryable
     * failure stops at once. Exhausted: 504 when the last failure was a timeout, else 502.
     */
    const tryInOrder = Effect.fnUntraced(function*(
      ordered: ReadonlyArray<Candidate>,
      attempt: (candidate: Candidate) => Effect.Effect<unknown, UpstreamError>
    ) {
      let last: UpstreamError | undefined
      for (const candidate of ordered) {
        const result = yield* Effect.either(attempt(candidate).pipe(
          span("ProviderRouter.attempt", () => ({
            "gen_ai.provider.name": genAiProvider(candidate.kind),
            "gateway.provider": candidate.providerSlug,
            "gen_ai.request.model": candidate.providerModelId
          }))
        ))
        if (result._tag === "Right") return { value: result.right, candidate }
        last = result.left
        yield* logUpstreamFailure(last, { provider: candidate.providerSlug, model: candidate.providerModelId, apiKey: candidate.apiKey })
        if (!last.retryable) break
      }
      if (last?.kind === "timeout") {
        return yield* new GatewayTimeout({ code: "upstream_timeout", message: upstreamFailureMessage(last) })
      }
      return yield* new BadGateway({ code: "upstream_error", message: upstreamFailureMessage(last) })
    })
    // The generator is defined once (tryInOrder), not per call (hot-path rule "no hidden class per call").
    const route = <A>(
      ordered: ReadonlyArray<Candidate>,
      attempt: (candidate: Candidate) => Effect.Effect<A, UpstreamError>
    ) => tryInOrder(ordered, attempt) as Effect.Effect<{ readonly value: A; readonly candidate: Candidate }, BadGateway | GatewayTimeout>

    return { route } as const
  })
}) {}
