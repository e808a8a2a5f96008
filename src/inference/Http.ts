// Handlers of the runtime endpoints: thin; the pipeline lives in the Inference layer. Chat
// completions are served here when GATEWAY_CHAT_FRONT_ROUTE is off, by the front route in
// src/inference/ChatRoute.ts otherwise.
import { HttpApiBuilder, HttpApp, HttpServerResponse } from "@effect/platform"
import { Effect, FiberRef, Option, Stream } from "effect"
import { DisplayLedger } from "../../layers/ledger/DisplayLedger.js"
import { currentExchange, serverTiming } from "../../layers/lib/RequestIds.js"
import { CurrentPrincipal } from "../../layers/access/KeyAuth.js"
import { ModelCatalog } from "../../layers/tenancy/ModelCatalog.js"
import { RateLimitSettings } from "../../layers/tenancy/RateLimitSettings.js"
import type { RateLimitExceeded } from "../../layers/pipeline/RateLimiter.js"
import { Embeddings } from "../../layers/pipeline/Embeddings.js"
import { Responses } from "../../layers/responses/Responses.js"
import { NotFound } from "../../schemas/Errors.js"
import type { ResponsesRequest } from "../../schemas/Responses.js"
import { requireEndUser } from "../http/Access.js"
import { GatewayApi } from "../http/Api.js"
import type { ChatRequestBody } from "../../schemas/Chat.js"
import type { EmbeddingRequest } from "../../schemas/Embeddings.js"
import { rateLimitHeaders, refusal, runtimeCaller, sseEncode, sseHeaders } from "./Answers.js"
import { chatEvent, makeChat, SSE_DONE } from "./Chat.js"

const runtimePrincipal = Effect.flatMap(CurrentPrincipal, runtimeCaller)
const utf8 = new TextEncoder()
const done = utf8.encode(SSE_DONE)

/** A model as GET /v1/models lists it (OpenAI shape). */
const modelObject = (m: { readonly slug: string; readonly created_at: Date; readonly owned_by: string }) => ({
  id: m.slug,
  object: "model" as const,
  created: Math.floor(m.created_at.getTime() / 1000),
  owned_by: m.owned_by
})

const withHeaders = (headers: Record<string, string>) =>
  Object.keys(headers).length === 0
    ? Effect.void
    : HttpApp.appendPreResponseHandler((_req, res) => Effect.succeed(HttpServerResponse.setHeaders(res, headers)))

/** An answer's headers with its Server-Timing (src/http/Server.ts runs every request in an exchange). */
const timed = (headers: Record<string, string>) =>
  Effect.flatMap(FiberRef.get(currentExchange), (exchange) =>
    withHeaders(exchange === null ? headers : { ...headers, "server-timing": serverTiming(exchange) }))

/** A refused admission: 429 with retry-after and the limit headers. */
const rateLimited = (e: RateLimitExceeded) => {
  const { error, headers } = refusal(e)
  return Effect.zipRight(withHeaders(headers), Effect.fail(error))
}

export const InferenceLive = HttpApiBuilder.group(GatewayApi, "inference", (handlers) =>
  Effect.gen(function*() {
    const catalog = yield* ModelCatalog
    const responses = yield* Responses
    const limits = yield* RateLimitSettings
    const display = yield* DisplayLedger
    const chat = yield* makeChat
    const embeddings = yield* Embeddings
    // The runtime handlers' generators are made once, here (hot-path rule "no hidden class per call",
    // docs/performance.md).
    const listModels = Effect.fnUntraced(function*() {
      const principal = yield* runtimePrincipal
      const models = yield* catalog.visibleModels(principal.platformId)
      return { object: "list" as const, data: models.map(modelObject) }
    })
    const retrieveModel = Effect.fnUntraced(function*(slug: string) {
      const principal = yield* runtimePrincipal
      const model = yield* catalog.visibleModel(principal.platformId, slug)
      if (Option.isNone(model)) {
        // The same answer as an inference call naming a model the platform may not call.
        return yield* new NotFound({ code: "model_not_found", param: "model", message: `The model '${slug}' does not exist or is not enabled` })
      }
      return modelObject(model.value)
    })
    const createChatCompletion = Effect.fnUntraced(function*(payload: ChatRequestBody) {
      const answer = yield* chat(yield* runtimePrincipal, payload).pipe(Effect.catchTag("RateLimitExceeded", rateLimited))
      yield* timed(answer.headers)
      if ("completion" in answer) return answer.completion
      const sse = answer.chunks.pipe(
        sseEncode(chatEvent),
        Stream.concat(Stream.suspend(() => answer.dropped() ? Stream.empty : Stream.succeed(done)))
      )
      return HttpServerResponse.stream(sse, { contentType: "text/event-stream", headers: sseHeaders })
    })
    const createResponse = Effect.fnUntraced(function*(payload: ResponsesRequest) {
      const caller = yield* runtimePrincipal
      if (payload.stream !== true) {
        const { admitted, response } = yield* responses.create(caller, payload).pipe(
          Effect.catchTag("RateLimitExceeded", rateLimited)
        )
        yield* timed(rateLimitHeaders(admitted.rateLimit))
        return response
      }
      const { admitted, events } = yield* responses.stream(caller, payload).pipe(
        Effect.catchTag("RateLimitExceeded", rateLimited)
      )
      yield* timed(rateLimitHeaders(admitted.rateLimit))
      const sse = events.pipe(sseEncode((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`))
      return HttpServerResponse.stream(sse, { contentType: "text/event-stream", headers: sseHeaders })
    })
    const createEmbedding = Effect.fnUntraced(function*(payload: EmbeddingRequest) {
      const { admitted, list } = yield* embeddings.create(yield* runtimePrincipal, payload).pipe(
        Effect.catchTag("RateLimitExceeded", rateLimited)
      )
      yield* withHeaders(rateLimitHeaders(admitted.rateLimit))
      return list
    })
    return handlers
      .handle("getMyBudget", () => Effect.flatMap(requireEndUser, (me) => display.mine(me.platformId, me.endUserId)))
      .handle("getMyRateLimits", () =>
        Effect.flatMap(requireEndUser, (me) => limits.effective(me.platformId, me.endUserId)))
      .handle("listModels", () => listModels())
      .handle("createChatCompletion", ({ payload }) => createChatCompletion(payload))
      .handle("createResponse", ({ payload }) => createResponse(payload))
      .handle("retrieveModel", ({ path }) => retrieveModel(path.model))
      .handle("retrieveResponse", ({ path }) => Effect.flatMap(runtimePrincipal, (caller) => responses.retrieve(caller, path.responseId)))
      .handle("deleteResponse", ({ path }) => Effect.flatMap(runtimePrincipal, (caller) => responses.remove(caller, path.responseId)))
      .handle("listResponseInputItems", ({ path, urlParams }) =>
        Effect.flatMap(runtimePrincipal, (caller) => responses.inputItems(caller, path.responseId, urlParams)))
      .handle("createEmbedding", ({ payload }) => createEmbedding(payload))
  }))
