// Messages: POST /v1/messages (the Anthropic Messages API) through the same pipeline as chat. The
// request, as the chat request it stands for (messages/ToChat.ts), passes Inference's five checks
// as a `messages` call; routing with failover picks a candidate; an `anthropic` upstream gets the
// client's body as it sent it and its answer or events are relayed (AnthropicNative), other kinds
// get the chat request through their adapter and their answer is translated back
// (messages/FromChat.ts). Settlement is Inference's, with the prompt-cache tokens priced apart.
// count_tokens counts with the gateway's tokenizer and bills nothing.
import { Effect, Stream } from "effect"
import type { ChatCompletion } from "../../schemas/Chat.js"
import { Forbidden, NotFound } from "../../schemas/Errors.js"
import type { CountTokensRequest, Message, MessagesRequest, StreamEvent } from "../../schemas/Messages.js"
import { countPromptTokensYielding, countToolTokensYielding, toolsText } from "../platform/Tokenizer.js"
import { ModelCatalog } from "../tenancy/ModelCatalog.js"
import { type Caller, completionText, Inference } from "./Inference.js"
import { chatStreamTranslator, messageOf } from "./messages/FromChat.js"
import { messagesTally } from "./messages/MessagesTally.js"
import { chatConversation, toChatRequest } from "./messages/ToChat.js"
import type { Candidate } from "./ProviderRouter.js"
import { UpstreamAdapters } from "./upstream/Adapters.js"
import { makeNativeMessages } from "./upstream/AnthropicNative.js"
import { upstreamLimitsConfig } from "./upstream/Limits.js"
import { type UpstreamCall, UpstreamError } from "./upstream/Upstream.js"

/** A Messages call as the client sent it: the decoded request, its raw body (passed on as it is) and its beta flags. */
export interface MessagesCall {
  readonly request: MessagesRequest
  readonly raw: Readonly<Record<string, unknown>>
  readonly beta: string | undefined
}

/** What only an `anthropic` upstream can serve: another kind is passed over (the next candidate is tried). */
const nativeOnly = (candidate: Candidate, what: string) =>
  new UpstreamError({ kind: "unsupported", message: `provider kind ${candidate.kind} cannot take ${what}`, retryable: true })

/** One attempt's answer: the message to send and what settlement reads of it. */
interface Answer {
  readonly message: Record<string, unknown>
  readonly usage: ChatCompletion["usage"]
  readonly cache: { readonly read: number; readonly write: number } | undefined
  readonly emitted: string
}

/** The event that ends a stream the upstream dropped: Anthropic's in-stream error, with the gateway's code. */
const droppedEvent: StreamEvent = {
  type: "error",
  error: { type: "api_error", message: "The upstream provider dropped the stream", code: "upstream_error", param: null }
}

export class Messages extends Effect.Service<Messages>()("gateway/Messages", {
  dependencies: [Inference.Default, ModelCatalog.Default, UpstreamAdapters.layer],
  effect: Effect.gen(function*() {
    const inference = yield* Inference
    const adapters = yield* UpstreamAdapters
    const catalog = yield* ModelCatalog
    const native = makeNativeMessages(yield* upstreamLimitsConfig)

    /** The five checks, on the chat request the call stands for. */
    const admit = Effect.fnUntraced(function*(caller: Caller, call: MessagesCall) {
      const translation = toChatRequest(call.request)
      const admitted = yield* inference.admit(caller, translation.request, "messages")
      return { admitted, translation }
    })

    const nativeCall = (call: MessagesCall, attempt: UpstreamCall) => ({
      baseUrl: attempt.baseUrl,
      apiKey: attempt.apiKey,
      providerModelId: attempt.providerModelId,
      timeoutMs: attempt.timeoutMs,
      headers: attempt.headers,
      body: call.raw,
      beta: call.beta
    })

    /** A non-streaming call: the message (relayed or translated) with the usage it was billed on. */
    const create = Effect.fnUntraced(function*(caller: Caller, call: MessagesCall) {
      const { admitted, translation } = yield* admit(caller, call)
      const relabeled = (message: Record<string, unknown>): Record<string, unknown> => ({ ...message, id: admitted.requestId, model: admitted.request.model })
      const { value, usage } = yield* inference.serve(
        admitted,
        (candidate, attempt): Effect.Effect<Answer, UpstreamError> => {
          if (candidate.kind === "anthropic") {
            return Effect.map(native.complete(nativeCall(call, attempt)), (answer) => ({ ...answer, message: relabeled(answer.message) }))
          }
          if (translation.nativeOnly !== undefined) return Effect.fail(nativeOnly(candidate, translation.nativeOnly))
          return Effect.map(adapters.get(candidate.kind).complete(attempt), (completion) => ({
            usage: completion.usage,
            cache: undefined,
            message: messageOf(completion, admitted.requestId, admitted.request.model) as unknown as Record<string, unknown>,
            emitted: completionText(completion)
          }))
        },
        (answer) => answer.emitted
      )
      // Usage out of bounds was replaced by the gateway's count: the answer shows what was billed.
      const message = usage === value.usage
        ? value.message
        : { ...value.message, usage: { input_tokens: usage.prompt_tokens, output_tokens: usage.completion_tokens } }
      return { admitted, message: message as unknown as Message }
    })

    /**
     * A streaming call: Anthropic's events, relayed or translated; an upstream drop mid-stream ends
     * them with an `error` event. Settled as chat streams are, whatever ends the stream.
     */
    const stream = Effect.fnUntraced(function*(caller: Caller, call: MessagesCall) {
      const { admitted, translation } = yield* admit(caller, call)
      const tally = messagesTally(admitted)
      const events = yield* inference.openStream(admitted, tally, (candidate, attempt, onEnd) => {
        if (candidate.kind === "anthropic") return native.stream(nativeCall(call, attempt), { step: tally.relay, onEnd })
        if (translation.nativeOnly !== undefined) return Effect.fail(nativeOnly(candidate, translation.nativeOnly))
        return Effect.map(adapters.get(candidate.kind).stream({ ...attempt, step: tally.chat.relabel, onEnd }), (chunks) => {
          const translator = chatStreamTranslator(admitted.requestId, admitted.request.model, admitted.promptEstimate)
          const closing = Stream.suspend(() => Stream.fromIterable(translator.finish(() => tally.chat.outcome(candidate).usage)))
          return chunks.pipe(Stream.mapConcat(translator.push), Stream.concat(closing))
        })
      })
      const body = events.pipe(
        Stream.catchAll((error) => Stream.make(droppedEvent).pipe(Stream.tap(() => Effect.logWarning(`upstream dropped mid-stream: ${error.message}`))))
      )
      return { admitted, events: body }
    })

    /**
     * count_tokens: the gateway tokenizer's count of the conversation (system, messages, tool
     * definitions) for a model the caller may use; nothing is billed or rate-limited.
     */
    const countTokens = Effect.fnUntraced(function*(caller: Caller, request: CountTokensRequest) {
      if (!caller.scopes.includes("inference")) {
        return yield* new Forbidden({ code: "insufficient_scope", message: "This key lacks the inference scope" })
      }
      const model = yield* catalog.visibleModel(caller.platformId, request.model)
      if (model._tag === "None") {
        return yield* new NotFound({ code: "model_not_found", param: "model", message: `The model '${request.model}' does not exist or is not enabled` })
      }
      const { messages, tools } = chatConversation(request)
      const prompt = yield* countPromptTokensYielding(messages)
      const toolTokens = yield* countToolTokensYielding(toolsText(tools))
      return { input_tokens: prompt + toolTokens }
    })

    return { create, stream, countTokens } as const
  })
}) {}
