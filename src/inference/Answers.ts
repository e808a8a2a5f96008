// What the runtime answers share: the caller check, OpenAI's x-ratelimit-* headers, the 429 of a
// refused admission, and SSE framing (events of one upstream batch written together).
import { Chunk, Effect, Stream } from "effect"
import type { Principal } from "../../layers/access/KeyAuth.js"
import type { RateLimitExceeded, RateLimitState } from "../../layers/pipeline/RateLimiter.js"
import { Forbidden, RateLimited } from "../../schemas/Errors.js"

/** Runtime routes: platform and end-user keys; the operator key has no platform. */
export const runtimeCaller = (principal: Principal) =>
  principal._tag === "Admin"
    ? Effect.fail(new Forbidden({ code: "forbidden", message: "Use a platform or end-user key" }))
    : Effect.succeed(principal)

/** OpenAI's x-ratelimit-* headers (none when the user has no limits), and retry-after on a refusal. */
export const rateLimitHeaders = (state: RateLimitState | null, retryAfterMs?: number): Record<string, string> => {
  const headers: Record<string, string> = {}
  const set = (name: string, value: number | null, unit = "") => {
    if (value !== null) headers[name] = `${value}${unit}`
  }
  if (state !== null) {
    set("x-ratelimit-limit-requests", state.limitRequests)
    set("x-ratelimit-remaining-requests", state.remainingRequests)
    set("x-ratelimit-reset-requests", state.resetRequestsMs, "ms")
    set("x-ratelimit-limit-tokens", state.limitTokens)
    set("x-ratelimit-remaining-tokens", state.remainingTokens)
    set("x-ratelimit-reset-tokens", state.resetTokensMs, "ms")
  }
  if (retryAfterMs !== undefined) headers["retry-after"] = String(Math.max(1, Math.ceil(retryAfterMs / 1000)))
  return headers
}

/** A refused admission as the client sees it (429), with its headers. */
export const refusal = (e: RateLimitExceeded) => ({
  error: new RateLimited({
    code: "rate_limit_exceeded",
    message: `Rate limit exceeded (${e.limit}); retry after ${Math.ceil(e.retryAfterMs / 1000)} s`
  }),
  headers: rateLimitHeaders(e.state, e.retryAfterMs)
})

const utf8 = new TextEncoder()

/**
 * The SSE events that arrived together, as one text (one socket write per batch). Read through
 * the chunk's array: `Chunk.reduce` copies the chunk into a new array first.
 */
export const sseText = <A>(batch: Chunk.Chunk<A>, format: (event: A) => string) => {
  let text = ""
  for (const event of Chunk.toReadonlyArray(batch)) text += format(event)
  return text
}

/**
 * The SSE events that arrived together, encoded and written together: one stage and one socket
 * write per batch the upstream delivered, not one per event. Nothing waits for more events.
 */
export const sseEncode = <A>(format: (event: A) => string) => <E, R>(events: Stream.Stream<A, E, R>) =>
  Stream.mapChunks(events, (batch) =>
    Chunk.isEmpty(batch) ? Chunk.empty<Uint8Array>() : Chunk.of(utf8.encode(sseText(batch, format))))

export const sseHeaders = { "cache-control": "no-cache", "x-accel-buffering": "no" }
