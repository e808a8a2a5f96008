// Responses: the Responses API on top of the shared inference pipeline (same five checks, same
// settlement, log rows of type `response`, or `agent` for an agent model). Input items and stored
// chains become chat messages; the answer becomes output items; hosted tool-app tools, and an
// agent model's per-user tools, run inline (the hybrid loop); every
// response is stored per end user. The item translation is in Items.ts, the stored chain in
// Chain.ts, reading back and deleting in Stored.ts, the hybrid loop in Hosted.ts, the stream's
// events in Events.ts.
import { PgClient } from "@effect/sql-pg"
import { Clock, Effect, Stream } from "effect"
import type { ChatMessage } from "../../schemas/Chat.js"
import { ValidationError } from "../../schemas/Errors.js"
import type { InputItem, ResponsesRequest } from "../../schemas/Responses.js"
import { toStorable } from "../lib/StorableText.js"
import { Listeners, mcpPublicUrl } from "../platform/Listeners.js"
import { type Caller, Inference } from "../pipeline/Inference.js"
import { KeyAuth } from "../access/KeyAuth.js"
import { ToolHost } from "../tools/ToolHost.js"
import { makeResponseStore } from "./Chain.js"
import { chunkEvents, eventSequence, hostedEvents, type ResponseEvent } from "./Events.js"
import { makeHostedTools } from "./Hosted.js"
import { makeStoredResponses } from "./Stored.js"
import { functionToolNames, inputParamOf, responseObject, toChatRequest, toMessages } from "./Items.js"

export type { ResponseEvent } from "./Events.js"
export { toMessages } from "./Items.js"

/** A refusal of the chat request the body became, named in the body's own fields. */
const inResponsesTerms = (e: ValidationError, body: ResponsesRequest): ValidationError => {
  switch (e.code) {
    case "max_tokens_too_small":
      return new ValidationError({ ...e, param: "max_output_tokens", message: "max_output_tokens must be at least 16 for this model" })
    case "unsupported_content": {
      const param = inputParamOf(body.input, e.param ?? "")
      return new ValidationError({ ...e, param, message: e.message.replace(/^[^:]*:/, `${param}:`) })
    }
    default:
      return e
  }
}

export class Responses extends Effect.Service<Responses>()("gateway/Responses", {
  dependencies: [Inference.Default, KeyAuth.Default, Listeners.Default, ToolHost.Default],
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const inference = yield* Inference
    const toolHost = yield* ToolHost
    const keyAuth = yield* KeyAuth
    const listeners = yield* Listeners
    const toolServiceUrl = Effect.provideService(mcpPublicUrl, Listeners, listeners)
    const { resolveHosted, withAgentTools, runLoop } = makeHostedTools({ inference, toolHost, keyAuth, toolServiceUrl })
    const { loadChain, storeSettled } = makeResponseStore(sql)
    const { retrieve, inputItems, remove } = makeStoredResponses(sql)

    /** Validation, context loading and admission (the five checks) shared by both modes. */
    const prepare = Effect.fnUntraced(function*(caller: Caller, body: ResponsesRequest) {
      const requested = yield* resolveHosted(caller, body.tools ?? [])
      const input: ReadonlyArray<InputItem> = typeof body.input === "string" ? [{ role: "user", content: body.input }] : body.input
      const chain = body.previous_response_id == null ? [] : yield* loadChain(caller, body.previous_response_id)
      const history = chain.flatMap((r) => [...r.input_items, ...r.output_items])
      const messages: Array<ChatMessage> = [
        ...(body.instructions ? [{ role: "system" as const, content: body.instructions }] : []),
        ...toMessages([...history, ...input])
      ]
      if (messages.length === 0) {
        return yield* new ValidationError({ code: "validation_error", param: "input", message: "input is empty" })
      }
      // An agent model runs the loop with the caller's per-user tools too, its calls logged as `agent`.
      const agent = yield* inference.isAgentModel(caller, body.model)
      const hosted = agent ? yield* withAgentTools(caller, requested, functionToolNames(body)) : requested
      const chat = toChatRequest(body, messages, hosted.chatTools)
      const admitted = yield* inference.admit(caller, chat, agent ? "agent" : "response").pipe(
        Effect.catchTag("ValidationError", (e) => Effect.fail(inResponsesTerms(e, body)))
      )
      const threadId = body.thread_id ?? chain.at(-1)?.thread_id ?? null
      const createdAt = new Date(yield* Clock.currentTimeMillis)
      return { admitted, input, threadId, createdAt, hosted }
    })

    /** Non-streaming: the loop's output, stored and returned. */
    const create = Effect.fnUntraced(function*(caller: Caller, body: ResponsesRequest) {
      const prepared = yield* prepare(caller, body)
      const { admitted, input, threadId, createdAt } = prepared
      const result = yield* runLoop(prepared)
      // The upstream's text as stored and as answered: NUL and unpaired surrogates become U+FFFD.
      const output = toStorable(result.output)
      yield* storeSettled(caller, admitted.requestId, body, input, output, result.usage, result.status, threadId, createdAt, result.incompleteReason)
      return {
        admitted,
        response: responseObject(admitted.requestId, body, createdAt, result.status, output, result.usage, threadId, result.incompleteReason)
      }
    })

    /**
     * Streaming: the spec's events in order, made from the chunks as they come; the end closes the
     * open items and sends response.completed with usage. An interrupted stream stops without
     * response.completed and is stored as incomplete.
     */
    const stream = Effect.fnUntraced(function*(caller: Caller, body: ResponsesRequest) {
      const prepared = yield* prepare(caller, body)
      if (prepared.hosted.servers.length > 0) return yield* streamHosted(caller, body, prepared)
      const { admitted, input, threadId, createdAt } = prepared
      const { chunks, dropped } = yield* inference.stream(admitted)
      const id = admitted.requestId
      const event = eventSequence()
      const { state, onChunk, close } = chunkEvents(event)
      let stored = false
      const persist = (status: "completed" | "incomplete") =>
        Effect.suspend(() => {
          if (stored) return Effect.void
          stored = true
          const output = toStorable(state.output.filter((o) => o !== undefined))
          return storeSettled(caller, id, body, input, output, state.usage, status, threadId, createdAt)
        })
      const created = responseObject(id, body, createdAt, "in_progress", [], null, threadId)
      const events = Stream.make(
        event("response.created", { response: created }),
        event("response.in_progress", { response: created })
      ).pipe(
        Stream.concat(chunks.pipe(Stream.mapConcat(onChunk))),
        Stream.concat(Stream.suspend(() => {
          if (dropped()) return Stream.empty
          const closing = close()
          const done = responseObject(id, body, createdAt, "completed", state.output, state.usage, threadId)
          return Stream.fromIterable([...closing, event("response.completed", { response: done })]).pipe(
            Stream.tap((e) => e.type === "response.completed" ? persist("completed") : Effect.void)
          )
        })),
        Stream.ensuring(persist("incomplete"))
      )
      return { admitted, events }
    })

    /**
     * With hosted tools the loop runs to its end first; the events are then emitted in the
     * spec's order: tool discovery, each mcp_call (arguments, progress, completion), then the
     * answer's items and response.completed.
     */
    const streamHosted = Effect.fnUntraced(function*(caller: Caller, body: ResponsesRequest, prepared: Effect.Effect.Success<ReturnType<typeof prepare>>) {
      const { admitted, input, threadId, createdAt, hosted } = prepared
      const id = admitted.requestId
      const event = eventSequence()
      const created = responseObject(id, body, createdAt, "in_progress", [], null, threadId)
      const run = yield* runLoop(prepared)
      const result = { ...run, output: toStorable(run.output) }
      yield* storeSettled(caller, id, body, input, result.output, result.usage, result.status, threadId, createdAt, result.incompleteReason)
      const done = responseObject(id, body, createdAt, result.status, result.output, result.usage, threadId, result.incompleteReason)
      const events: Stream.Stream<ResponseEvent> = Stream.fromIterable(hostedEvents(event, hosted.servers, result, created, done))
      return { admitted, events }
    })

    return { create, stream, retrieve, inputItems, remove } as const
  })
}) {}
