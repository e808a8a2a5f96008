// Handlers of the runtime endpoints: thin; the pipeline lives in the Inference layer.
import { HttpApiBuilder, HttpApp, HttpServerResponse } from "@effect/platform"
import { Chunk, Effect, Schema, Stream } from "effect"
import { DisplayLedger } from "../../layers/DisplayLedger.js"
import { Inference } from "../../layers/Inference.js"
import { CurrentPrincipal } from "../../layers/KeyAuth.js"
import { ModelCatalog } from "../../layers/ModelCatalog.js"
import { RateLimitSettings } from "../../layers/RateLimitSettings.js"
import type { RateLimitExceeded, RateLimitState } from "../../layers/RateLimiter.js"
import { Responses } from "../../layers/Responses.js"
import { ChatCompletion, type ChatRequest } from "../../schemas/Chat.js"
import { Forbidden, RateLimited, ValidationError } from "../../schemas/Errors.js"
import { requireEndUser } from "../http/Access.js"
import { GatewayApi } from "../http/Api.js"

/** Runtime routes: platform and end-user keys; the operator key has no platform. */
const runtimePrincipal = Effect.gen(function*() {
  const principal = yield* CurrentPrincipal
  if (principal._tag === "Admin") {
    return yield* new Forbidden({ code: "forbidden", message: "Use a platform or end-user key" })
  }
  return principal
})

/** OpenAI's x-ratelimit-* headers (omitted when the user has no limits). */
const rateLimitHeaders = (state: RateLimitState | null, retryAfterMs?: number): Record<string, string> => {
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

const withHeaders = (headers: Record<string, string>) =>
  Object.keys(headers).length === 0
    ? Effect.void
    : HttpApp.appendPreResponseHandler((_req, res) => Effect.succeed(HttpServerResponse.setHeaders(res, headers)))

/** A refused admission: 429 with retry-after and the limit headers. */
const rateLimited = (e: RateLimitExceeded) =>
  withHeaders(rateLimitHeaders(e.state, e.retryAfterMs)).pipe(
    Effect.zipRight(Effect.fail(new RateLimited({
      code: "rate_limit_exceeded",
      message: `Rate limit exceeded (${e.limit}); retry after ${Math.ceil(e.retryAfterMs / 1000)} s`
    })))
  )

/**
 * The answer encoded here, synchronously, as the endpoint's success schema would: the same
 * fields in the same order, without the effectful encoder's per-field Effect steps.
 */
const encodeCompletion = Schema.encodeSync(ChatCompletion)

const utf8 = new TextEncoder()
const DONE = utf8.encode("data: [DONE]\n\n")

/**
 * The SSE events that arrived together, encoded and written together: one stage and one socket
 * write per batch the upstream delivered, not one per event. Nothing waits for more events.
 */
const sseEncode = <A>(format: (event: A) => string) => <E, R>(events: Stream.Stream<A, E, R>) =>
  Stream.mapChunks(events, (batch) =>
    Chunk.isEmpty(batch) ? Chunk.empty<Uint8Array>() : Chunk.of(utf8.encode(Chunk.reduce(batch, "", (text, e) => text + format(e)))))

const sseHeaders = { "cache-control": "no-cache", "x-accel-buffering": "no" }

export const InferenceLive = HttpApiBuilder.group(GatewayApi, "inference", (handlers) =>
  Effect.gen(function*() {
    const catalog = yield* ModelCatalog
    const inference = yield* Inference
    const responses = yield* Responses
    const limits = yield* RateLimitSettings
    const display = yield* DisplayLedger
    return handlers
      .handle("getMyBudget", () => Effect.flatMap(requireEndUser, (me) => display.mine(me.platformId, me.endUserId)))
      .handle("getMyRateLimits", () =>
        Effect.flatMap(requireEndUser, (me) => limits.effective(me.platformId, me.endUserId)))
      .handle("listModels", () =>
        Effect.gen(function*() {
          const principal = yield* runtimePrincipal
          const models = yield* catalog.visibleModels(principal.platformId)
          return {
            object: "list" as const,
            data: models.map((m) => ({
              id: m.slug,
              object: "model" as const,
              created: Math.floor(m.created_at.getTime() / 1000),
              owned_by: m.owned_by
            }))
          }
        }))
      .handle("createChatCompletion", ({ payload }) =>
        Effect.gen(function*() {
          const caller = yield* runtimePrincipal
          const hosted = (payload.tools ?? []).findIndex((t) => t.type === "mcp")
          if (hosted >= 0) {
            return yield* new ValidationError({
              code: "unsupported_tool_type",
              param: `tools.${hosted}.type`,
              message: "Tools of type mcp are only supported on /v1/responses"
            })
          }
          const admitted = yield* inference.admit(caller, payload as ChatRequest).pipe(
            Effect.catchTag("RateLimitExceeded", rateLimited)
          )
          yield* withHeaders(rateLimitHeaders(admitted.rateLimit))
          if (payload.stream !== true) return HttpServerResponse.unsafeJson(encodeCompletion(yield* inference.complete(admitted)))
          const { chunks, dropped } = yield* inference.stream(admitted)
          const sse = chunks.pipe(
            sseEncode((chunk) => `data: ${JSON.stringify(chunk)}\n\n`),
            // A client detects an upstream drop by the missing [DONE].
            Stream.concat(Stream.suspend(() => dropped() ? Stream.empty : Stream.make(DONE)))
          )
          return HttpServerResponse.stream(sse, { contentType: "text/event-stream", headers: sseHeaders })
        }))
      .handle("createResponse", ({ payload }) =>
        Effect.gen(function*() {
          const caller = yield* runtimePrincipal
          if (payload.stream !== true) {
            const { admitted, response } = yield* responses.create(caller, payload).pipe(
              Effect.catchTag("RateLimitExceeded", rateLimited)
            )
            yield* withHeaders(rateLimitHeaders(admitted.rateLimit))
            return response
          }
          const { admitted, events } = yield* responses.stream(caller, payload).pipe(
            Effect.catchTag("RateLimitExceeded", rateLimited)
          )
          yield* withHeaders(rateLimitHeaders(admitted.rateLimit))
          const sse = events.pipe(sseEncode((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`))
          return HttpServerResponse.stream(sse, { contentType: "text/event-stream", headers: sseHeaders })
        }))
  }))
