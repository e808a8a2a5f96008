// POST /v1/chat/completions, the gateway's hottest route, served straight from node:http in front
// of HttpApi when GATEWAY_CHAT_FRONT_ROUTE is on (the default): one Effect program per request on
// the listener's runtime, composed from the same service layers, with the same checks in the
// same order (body, key, payload, caller), the same OpenAI-shaped errors and headers, and the
// same server span as the endpoint's HttpApi handler (src/inference/Http.ts), which serves it
// when the switch is off. HttpApi's per-request machinery (router, middleware and handler
// contexts, response conversion) was a large share of every call's CPU (docs/decisions.md
// "The chat route").
import { Headers, HttpApiError, HttpRouter, HttpServerError, HttpTraceContext } from "@effect/platform"
import { Cause, Config, Context, Effect, FiberRef, FiberRefs, Option, Runtime, type Stream } from "effect"
import * as FindMyWay from "find-my-way-ts"
import type { IncomingMessage, ServerResponse } from "node:http"
import { KeyAuth } from "../../layers/access/KeyAuth.js"
import type { Caller, Inference } from "../../layers/pipeline/Inference.js"
import { type ChatChunk, ChatRequestBody } from "../../schemas/Chat.js"
import { BadRequest, wireError } from "../../schemas/Errors.js"
import { apiErrorOf, checkedBody } from "../http/ErrorMapping.js"
import type { FrontRoute } from "../http/DrainingServer.js"
import { readNodeBody } from "../http/RequestBody.js"
import { checkedDecoder } from "../../layers/lib/WireCheck.js"
import { annotateCurrentSpan, tracingEnabled } from "../../layers/lib/CurrentSpan.js"
import { currentExchange, type HttpExchange, httpExchange, requestIdOf, serverTiming } from "../../layers/lib/RequestIds.js"
import { pullEach } from "../../layers/lib/StreamPull.js"
import { refusal, runtimeCaller, sseHeaders, sseText } from "./Answers.js"
import { chatEvent, makeChat, SSE_DONE } from "./Chat.js"

/**
 * What the route answers: JSON text (an answer or an error), or a stream of chunks sent as SSE,
 * ended by `data: [DONE]` unless the upstream dropped (a client detects a drop by its absence).
 */
type Reply =
  | { readonly status: number; readonly headers: Record<string, string>; readonly json: string }
  | {
    readonly headers: Record<string, string>
    readonly chunks: Stream.Stream<ChatChunk>
    readonly dropped: () => boolean
    readonly terminated: () => boolean
  }

const jsonReply = (status: number, body: unknown, headers: Record<string, string> = {}): Reply => ({
  status,
  headers,
  json: JSON.stringify(body)
})

/**
 * Synchronous: the schema has no effectful parts, and an Either costs far less than an Effect. A
 * body with only the fields the schema declares, all valid, is what Schema would decode it to:
 * the compiled check takes it as it is; Schema decodes the rest, dropping unknown fields, and
 * says what is wrong (layers/lib/WireCheck.ts).
 */
const decodeBody = checkedDecoder(ChatRequestBody, "refuse")

/**
 * The payload as HttpApi decodes it: no body is null; text that is not JSON is a 400 (as the
 * platform's Decode error), a schema mismatch the decode error (422 with the issue's path).
 */
const payloadOf = (text: string | null) =>
  Effect.suspend((): Effect.Effect<ChatRequestBody, BadRequest | HttpApiError.HttpApiDecodeError> => {
    let json: unknown
    try {
      json = text === null || text === "" ? null : JSON.parse(text)
    } catch (error) {
      return Effect.fail(notJson(error))
    }
    const decoded = decodeBody(json)
    return decoded._tag === "Right" ? Effect.succeed(decoded.right) : HttpApiError.HttpApiDecodeError.refailParseError(decoded.left)
  })

export const notJson = (cause: unknown) =>
  new BadRequest({
    code: "invalid_json",
    message: `The request body is not valid JSON${cause instanceof Error ? `: ${cause.message}` : ""}`
  })

/**
 * Response headers from several sets, later sets winning. Built up, never spread: V8 gives an
 * object made by a spread a hidden class of its own, and each property added after it a new one,
 * a few microseconds each (hot-path rule "no hidden class per call", docs/performance.md).
 */
export const headersOf = (...sets: ReadonlyArray<Readonly<Record<string, string | number>>>) => {
  const head: Record<string, string | number> = {}
  for (const set of sets) for (const name in set) head[name] = set[name]!
  return head
}

/** A JSON answer with `headers` and the request's `ids`; an answer (200) carries its Server-Timing too. */
export const writeJson = (
  res: ServerResponse,
  status: number,
  headers: Record<string, string>,
  ids: Record<string, string>,
  json: string,
  exchange: HttpExchange
) =>
  Effect.sync(() => {
    const head = headersOf(headers, ids, { "content-type": "application/json", "content-length": Buffer.byteLength(json) })
    if (status === 200) head["server-timing"] = serverTiming(exchange)
    res.writeHead(status, head)
    res.end(json)
  })

/**
 * Writes a JSON reply; an SSE reply streams, waiting for the socket to drain when it must. Every
 * reply carries the request's x-request-id, an answer (200) its Server-Timing too. The
 * events are encoded and [DONE] added here, by the consumer, not by stages of the stream: every
 * Effect Stream stage costs on each stream (hot-path rule "few stream stages"). The stream is pulled
 * (layers/lib/StreamPull.ts), not run into a sink, and its finalizers, the settlement among them,
 * have run before the answer ends.
 */
const send = (res: ServerResponse, reply: Reply, exchange: HttpExchange, underLoad: () => boolean): Effect.Effect<void> => {
  const ids = { "x-request-id": exchange.id }
  if ("json" in reply) return writeJson(res, reply.status, reply.headers, ids, reply.json, exchange)
  return Effect.suspend(() => {
    res.writeHead(200, headersOf(reply.headers, sseHeaders, ids, { "server-timing": serverTiming(exchange), "content-type": "text/event-stream" }))
    // The chunks cannot fail: the pull ends with the stream. Under load, the last batch (the
    // upstream's terminator was read) waits in the corked socket for the end, which follows as
    // soon as the call's settlement is on record: one socket write instead of two per short
    // answer (hot-path rule "keep the upstream's batches; one write per answer",
    // docs/performance.md). Earlier batches go out at once. A lone request's batches go out as
    // they are written: node:http holds a chunked write in the corked socket until the next tick,
    // which would come only after the settlement's work and its record's write.
    return pullEach(reply.chunks, (batch) => {
      const load = underLoad()
      if (reply.terminated() && !res.writableCorked && load) res.cork()
      const room = res.write(sseText(batch, chatEvent))
      if (!load) res.uncork()
      if (room) return undefined
      // A corked socket drains only once uncorked: a batch past its buffer goes out now.
      if (res.writableCorked) res.uncork()
      return drained(res)
    })
  }).pipe(
    Effect.zipRight(Effect.sync(() => res.end(reply.dropped() ? undefined : SSE_DONE))),
    Effect.catchAllCause((cause) => Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : Effect.logError("chat stream failed", cause))
  )
}

/**
 * An answer whose head went out ends when its fiber does, however that ended (interrupted by a
 * shutdown's deadline, say): run as the fiber's observer, not as an `Effect.ensuring`, which
 * costs an uninterruptible region and a match per stream (hot-path rule "plain code at the I/O
 * edges", docs/performance.md).
 */
export const endStarted = (res: ServerResponse) => () => {
  if (res.headersSent && !res.writableEnded) res.end()
}

export const drained = (res: ServerResponse) =>
  Effect.async<void>((resume) => {
    const go = () => resume(Effect.void)
    res.once("drain", go)
    return Effect.sync(() => res.off("drain", go))
  })

/** The platform's server span (name, kind, attributes), made only when tracing is on. */
export const serverSpan = (req: IncomingMessage, res: ServerResponse) => <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Effect.flatMap(FiberRef.get(Headers.currentRedactedNames), (redacted) => {
    const headers = Headers.fromInput(req.headers as Record<string, string | ReadonlyArray<string> | undefined>)
    return Effect.useSpan(`http.server ${req.method}`, {
      parent: Option.getOrUndefined(HttpTraceContext.fromHeaders(headers)),
      kind: "server",
      captureStackTrace: false
    }, (span) => {
      span.attribute("http.request.method", req.method)
      try {
        const url = new URL(req.url ?? "/", `${headers["x-forwarded-proto"] === "https" ? "https" : "http"}://${headers.host ?? "localhost"}`)
        span.attribute("url.full", url.toString())
        span.attribute("url.path", url.pathname)
        if (url.search.length > 1) span.attribute("url.query", url.search.slice(1))
        span.attribute("url.scheme", url.protocol.slice(0, -1))
      } catch {
        // not a URL: the platform leaves the url.* attributes out too
      }
      if (headers["user-agent"] !== undefined) span.attribute("user_agent.original", headers["user-agent"])
      for (const [name, value] of Object.entries(Headers.redact(headers, redacted))) {
        span.attribute(`http.request.header.${name}`, String(value))
      }
      if (req.socket.remoteAddress !== undefined) span.attribute("client.address", req.socket.remoteAddress)
      return Effect.withParentSpan(self, span).pipe(Effect.ensuring(Effect.sync(() => {
        span.attribute("http.response.status_code", res.statusCode)
        const sent = Headers.fromInput(res.getHeaders() as Record<string, string | ReadonlyArray<string> | undefined>)
        for (const [name, value] of Object.entries(Headers.redact(sent, redacted))) {
          span.attribute(`http.response.header.${name}`, String(value))
        }
      })))
    })
  })

/**
 * The route as a node:http request listener that takes the requests it serves (true) and leaves
 * the others to HttpApi (false).
 */
export const makeChatRoute: Effect.Effect<FrontRoute, never, KeyAuth | Inference> = Effect.gen(function*() {
  const keyAuth = yield* KeyAuth
  const runtime = yield* Effect.runtime<never>()
  const tracing = yield* tracingEnabled
  // The requests need no service from the context (their program's requirements are `never`:
  // every service was taken above), so they run with an empty one. Effect copies or compares the
  // whole context wherever a fiber's context changes: a scope, a span, and a stream's pull, whose
  // finalizer runs under the runtime it captured (Effect.provide: a diff and a merge of the
  // context). With the program's sixty services in it, each was a copy of sixty entries
  // (hot-path rule "no context copies per call", docs/performance.md).
  const runFork = Runtime.runFork(Runtime.make({ context: Context.empty(), fiberRefs: runtime.fiberRefs, runtimeFlags: runtime.runtimeFlags }))
  // Matched as HttpApi's router matches it (same router, same settings): it decodes escapes and
  // ignores the query, letter case, repeated and trailing slashes, so no request of the
  // endpoint's reaches its HttpApi handler.
  const routes = FindMyWay.make<true>(FiberRefs.getOrDefault(runtime.fiberRefs, HttpRouter.currentRouterConfig))
  routes.on("POST", "/v1/chat/completions", true)

  const answer = yield* makeChat
  /** The answer as the route sends it; the typed completion is its own wire form (hot-path rule "encode once"). */
  const chat = (caller: Caller, payload: ChatRequestBody) =>
    answer(caller, payload).pipe(
      Effect.map((a): Reply => "completion" in a ? jsonReply(200, a.completion, a.headers) : a),
      Effect.catchTag("RateLimitExceeded", (e) => {
        const { error, headers } = refusal(e)
        return Effect.succeed(jsonReply(429, wireError(error).body, headers))
      })
    )

  /** The checks in HttpApi's order: body (before routing), key (middleware), payload, caller. */
  const reply = Effect.fnUntraced(function*(req: IncomingMessage) {
    const text = yield* checkedBody(req.method ?? "POST", req.headers, (max, tooLarge) =>
      readNodeBody(req, max, tooLarge, (cause) => Effect.fail(notJson(cause))))
    const principal = yield* keyAuth.authenticate(req.headers.authorization)
    if (tracing && principal._tag !== "Admin") {
      yield* annotateCurrentSpan({
        "platform.id": principal.platformId,
        ...(principal._tag === "EndUserKey" ? { "end_user.id": principal.endUserId } : {})
      })
    }
    const payload = yield* payloadOf(text)
    return yield* chat(yield* runtimeCaller(principal), payload)
  })

  const serve = (req: IncomingMessage, res: ServerResponse, exchange: HttpExchange): Effect.Effect<void> => {
    const answered = Effect.matchCauseEffect(reply(req), {
      onSuccess: (r) => send(res, r, exchange, underLoad),
      onFailure: (cause) =>
        Effect.flatMap(apiErrorOf(cause), (error) => {
          // None: the client left; there is no one to answer.
          if (Option.isNone(error)) return Effect.void
          const { status, body } = wireError(error.value)
          return send(res, jsonReply(status, body), exchange, underLoad)
        })
    })
    if (tracing) return serverSpan(req, res)(answered)
    // No spans: a client's trace context still travels on to the upstream, unchanged.
    const traceparent = req.headers.traceparent
    if (typeof traceparent !== "string") return answered
    return Option.match(HttpTraceContext.fromHeaders(Headers.unsafeFromRecord({ traceparent })), {
      onNone: () => answered,
      onSome: (parent) => Effect.withParentSpan(answered, parent)
    })
  }

  /** Requests of the route in flight: more than one is load, where a write saved counts more than a first byte's wait. */
  let inFlight = 0
  const underLoad = () => inFlight > 1

  return (req: IncomingMessage, res: ServerResponse): boolean => {
    if (req.method !== "POST" || req.url === undefined || routes.find("POST", req.url) === undefined) return false
    inFlight++
    const exchange = httpExchange(requestIdOf(req.headers["x-request-id"]))
    // The request's own fiber: set, never restored (Effect.locally would cost a region per call).
    const fiber = runFork(Effect.zipRight(FiberRef.set(currentExchange, exchange), serve(req, res, exchange)))
    fiber.addObserver(endStarted(res))
    // As the platform: a client that leaves interrupts its request (a stream settles what it sent).
    res.on("close", () => {
      inFlight--
      if (!res.writableEnded) fiber.unsafeInterruptAsFork(HttpServerError.clientAbortFiberId)
    })
    return true
  }
})

/** GATEWAY_CHAT_FRONT_ROUTE: the front route (on, the default) or the HttpApi handler (off). */
export const chatFrontRoute = Effect.flatMap(
  Config.boolean("GATEWAY_CHAT_FRONT_ROUTE").pipe(Config.withDefault(true)),
  (on) => on ? makeChatRoute : Effect.succeed(undefined)
)
