// POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages API, served from
// node:http in front of HttpApi (as the chat route is) because its answers are Anthropic's, errors
// included: `{type:"error", error:{type, message, code, param}}`, where `type` is Anthropic's
// name for the status and `code` the gateway's (which 402 it is, say). The checks run in the chat
// route's order (body, key, payload, caller); the key comes as `Authorization: Bearer` (Claude
// Code's ANTHROPIC_AUTH_TOKEN) or `x-api-key` (the Anthropic SDK's apiKey). Streams are SSE with
// `event:` lines.
import { HttpApiError, HttpRouter, HttpServerError } from "@effect/platform"
import { Cause, Context, Effect, FiberRef, FiberRefs, Option, Runtime, Schema, type Stream } from "effect"
import * as FindMyWay from "find-my-way-ts"
import type { IncomingMessage, ServerResponse } from "node:http"
import { KeyAuth } from "../../layers/access/KeyAuth.js"
import { annotateCurrentSpan, tracingEnabled } from "../../layers/lib/CurrentSpan.js"
import { pullEach } from "../../layers/lib/StreamPull.js"
import { currentExchange, type HttpExchange, httpExchange, requestIdOf, serverTiming } from "../../layers/lib/RequestIds.js"
import type { Caller } from "../../layers/pipeline/Inference.js"
import { Messages } from "../../layers/pipeline/Messages.js"
import { type BadRequest, wireError, type WireError } from "../../schemas/Errors.js"
import { CountTokensRequest, type MessagesErrorBody, MessagesRequest, type StreamEvent } from "../../schemas/Messages.js"
import { apiErrorOf, checkedBody } from "../http/ErrorMapping.js"
import type { FrontRoute } from "../http/DrainingServer.js"
import { readNodeBody } from "../http/RequestBody.js"
import { rateLimitHeaders, refusal, runtimeCaller, sseHeaders, sseText } from "./Answers.js"
import { drained, endStarted, headersOf, notJson, serverSpan, writeJson } from "./ChatRoute.js"

/** Anthropic's error type for each status the gateway answers (docs/decisions.md, "Messages API"). */
const ERROR_TYPES: Readonly<Record<number, string>> = {
  400: "invalid_request_error",
  401: "authentication_error",
  402: "billing_error",
  403: "permission_error",
  404: "not_found_error",
  409: "invalid_request_error",
  413: "request_too_large",
  415: "invalid_request_error",
  422: "invalid_request_error",
  429: "rate_limit_error",
  500: "api_error",
  502: "api_error",
  503: "overloaded_error",
  504: "timeout_error"
}

/** An error as the Messages API answers it: the gateway's status, Anthropic's body, the gateway's code. */
export const messagesError = (e: WireError): { readonly status: number; readonly body: MessagesErrorBody } => {
  const { status, body } = wireError(e)
  return {
    status,
    body: { type: "error", error: { type: ERROR_TYPES[status] ?? "api_error", message: body.error.message, code: body.error.code, param: body.error.param } }
  }
}

type Reply =
  | { readonly status: number; readonly headers: Record<string, string>; readonly json: string }
  | { readonly headers: Record<string, string>; readonly events: Stream.Stream<StreamEvent> }

const jsonReply = (status: number, body: unknown, headers: Record<string, string> = {}): Reply => ({ status, headers, json: JSON.stringify(body) })

/** What every path of the route holds (the router then matches it as HttpApi's router would). */
const MESSAGES_PATH = /\/messages/i

/** One event as SSE: its type as the event name. */
const sseEvent = (event: StreamEvent) => `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`

/** The body as JSON (kept as sent, for `anthropic` upstreams) and as the schema decodes it. */
const payloadOf = <A, I>(schema: Schema.Schema<A, I>) => {
  const decode = Schema.decodeUnknownEither(schema)
  return (text: string | null) =>
    Effect.suspend((): Effect.Effect<{ readonly raw: Record<string, unknown>; readonly request: A }, BadRequest | HttpApiError.HttpApiDecodeError> => {
      let json: unknown
      try {
        json = text === null || text === "" ? null : JSON.parse(text)
      } catch (error) {
        return Effect.fail(notJson(error))
      }
      const decoded = decode(json)
      return decoded._tag === "Right"
        ? Effect.succeed({ raw: json as Record<string, unknown>, request: decoded.right })
        : HttpApiError.HttpApiDecodeError.refailParseError(decoded.left)
    })
}
const messagesPayload = payloadOf(MessagesRequest)
const countPayload = payloadOf(CountTokensRequest)

/** The key as Anthropic clients send it: a Bearer token first (ANTHROPIC_AUTH_TOKEN), else x-api-key. */
const authorizationOf = (req: IncomingMessage): string | undefined => {
  if (req.headers.authorization !== undefined) return req.headers.authorization
  const key = req.headers["x-api-key"]
  return typeof key === "string" && key.trim() !== "" ? `Bearer ${key.trim()}` : undefined
}

/** Writes a JSON reply, or streams the events (waiting for the socket to drain when it must); every reply carries the request's id. */
const send = (res: ServerResponse, reply: Reply, exchange: HttpExchange): Effect.Effect<void> => {
  const ids = { "x-request-id": exchange.id, "request-id": exchange.id }
  if ("json" in reply) return writeJson(res, reply.status, reply.headers, ids, reply.json, exchange)
  return Effect.suspend(() => {
    res.writeHead(200, headersOf(reply.headers, sseHeaders, ids, { "server-timing": serverTiming(exchange), "content-type": "text/event-stream" }))
    return pullEach(reply.events, (batch) => res.write(sseText(batch, sseEvent)) ? undefined : drained(res))
  }).pipe(
    Effect.zipRight(Effect.sync(() => res.end())),
    Effect.catchAllCause((cause) => Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : Effect.logError("messages stream failed", cause))
  )
}

export const makeMessagesRoute: Effect.Effect<FrontRoute, never, KeyAuth | Messages> = Effect.gen(function*() {
  const keyAuth = yield* KeyAuth
  const messages = yield* Messages
  const runtime = yield* Effect.runtime<never>()
  const tracing = yield* tracingEnabled
  // As the chat route: the program needs no service from the context, so it runs with an empty one.
  const runFork = Runtime.runFork(Runtime.make({ context: Context.empty(), fiberRefs: runtime.fiberRefs, runtimeFlags: runtime.runtimeFlags }))
  const routes = FindMyWay.make<"create" | "count">(FiberRefs.getOrDefault(runtime.fiberRefs, HttpRouter.currentRouterConfig))
  routes.on("POST", "/v1/messages", "create")
  routes.on("POST", "/v1/messages/count_tokens", "count")

  const create = (caller: Caller, text: string | null, req: IncomingMessage) =>
    Effect.flatMap(messagesPayload(text), ({ raw, request }) => {
      const beta = req.headers["anthropic-beta"]
      const call = { request, raw, beta: typeof beta === "string" ? beta : undefined }
      const answer = request.stream === true
        ? Effect.map(messages.stream(caller, call), ({ admitted, events }): Reply => ({ headers: rateLimitHeaders(admitted.rateLimit), events }))
        : Effect.map(messages.create(caller, call), ({ admitted, message }) => jsonReply(200, message, rateLimitHeaders(admitted.rateLimit)))
      return Effect.catchTag(answer, "RateLimitExceeded", (e) => Effect.succeed(rateLimited(e)))
    })

  const count = (caller: Caller, text: string | null) =>
    Effect.flatMap(countPayload(text), ({ request }) => Effect.map(messages.countTokens(caller, request), (counted) => jsonReply(200, counted)))

  /** The checks in the chat route's order: body, key, payload, caller. */
  const reply = Effect.fnUntraced(function*(req: IncomingMessage, route: "create" | "count") {
    const text = yield* checkedBody(req.method ?? "POST", req.headers, (max, tooLarge) =>
      readNodeBody(req, max, tooLarge, (cause) => Effect.fail(notJson(cause))))
    const principal = yield* keyAuth.authenticate(authorizationOf(req))
    if (tracing && principal._tag !== "Admin") {
      yield* annotateCurrentSpan({
        "platform.id": principal.platformId,
        ...(principal._tag === "EndUserKey" ? { "end_user.id": principal.endUserId } : {})
      })
    }
    const caller = yield* runtimeCaller(principal)
    return yield* (route === "create" ? create(caller, text, req) : count(caller, text))
  })

  const serve = (req: IncomingMessage, res: ServerResponse, exchange: HttpExchange, route: "create" | "count"): Effect.Effect<void> => {
    const answered = Effect.matchCauseEffect(reply(req, route), {
      onSuccess: (r) => send(res, r, exchange),
      onFailure: (cause) =>
        Effect.flatMap(apiErrorOf(cause), (error) => {
          if (Option.isNone(error)) return Effect.void
          const { status, body } = messagesError(error.value)
          return send(res, jsonReply(status, body), exchange)
        })
    })
    return tracing ? serverSpan(req, res)(answered) : answered
  }

  return (req: IncomingMessage, res: ServerResponse): boolean => {
    // Other routes pass with one test of their path, not a router lookup.
    if (req.method !== "POST" || req.url === undefined || !MESSAGES_PATH.test(req.url)) return false
    const route = routes.find("POST", req.url)?.handler
    if (route === undefined) return false
    const exchange = httpExchange(requestIdOf(req.headers["x-request-id"]))
    const fiber = runFork(Effect.zipRight(FiberRef.set(currentExchange, exchange), serve(req, res, exchange, route)))
    fiber.addObserver(endStarted(res))
    res.on("close", () => {
      if (!res.writableEnded) fiber.unsafeInterruptAsFork(HttpServerError.clientAbortFiberId)
    })
    return true
  }
})

/** A refused admission: 429 with retry-after and the limit headers, in Anthropic's shape. */
const rateLimited = (e: Parameters<typeof refusal>[0]): Reply => {
  const { error, headers } = refusal(e)
  const { status, body } = messagesError(error)
  return jsonReply(status, body, headers)
}
