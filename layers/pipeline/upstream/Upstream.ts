// The contract every upstream adapter (openai, openai-responses, anthropic, mock) fulfils:
// take an OpenAI-shaped chat request, call the provider in its own wire format, and answer
// an OpenAI-shaped completion or a stream of OpenAI-shaped chunks; the kinds that can embed
// (openai, mock) also turn texts into vectors.
import { Data, type Effect, type Exit, type Stream } from "effect"
import type { ChatChunk, ChatCompletion, ChatRequest, Usage } from "../../../schemas/Chat.js"

export type ProviderKind = "openai" | "openai-responses" | "anthropic" | "mock"

/**
 * `gen_ai.provider.name` (OpenTelemetry GenAI conventions) by kind: the API the gateway speaks,
 * as instrumentations name it ("openai" for any OpenAI-compatible server); the operator's
 * provider slug is `gateway.provider` on spans.
 */
const GEN_AI_PROVIDER: Record<ProviderKind, string> = { openai: "openai", "openai-responses": "openai", anthropic: "anthropic", mock: "mock" }
export const genAiProvider = (kind: ProviderKind): string => GEN_AI_PROVIDER[kind]

export interface UpstreamCall {
  /** Provider base URL, e.g. https://api.openai.com/v1 (adapters append their paths). */
  readonly baseUrl: string
  readonly apiKey: string
  /** The provider's model id; replaces `request.model` on the wire. */
  readonly providerModelId: string
  readonly request: ChatRequest
  /** Per-attempt limit until the upstream answers (headers for streams). */
  readonly timeoutMs: number
  /** Extra headers to propagate (e.g. traceparent). */
  readonly headers?: Readonly<Record<string, string>> | undefined
  /**
   * Streams: the caller's per-chunk step (relabelling, accounting), applied to each chunk as the
   * stream yields it, in the stream's own stage (a stage of the caller's would cost on every
   * stream); a chunk it maps to undefined is left out.
   */
  readonly step?: ((chunk: ChatChunk) => ChatChunk | undefined) | undefined
  /**
   * Streams: what the caller runs once the stream has ended, however it ended (its exit: done,
   * failed or interrupted), in the stream's own finalizer after the adapter's cleanup: a finalizer
   * stage of the caller's own would cost on every stream (hot-path rule "few stream stages",
   * docs/performance.md). Adapters must run it whenever the stream they return has started.
   */
  readonly onEnd?: ((exit: Exit.Exit<unknown, UpstreamError>) => Effect.Effect<void>) | undefined
  /**
   * Streams: called when the provider's terminator is read, before the chunks of that read are
   * handed out: the stream ends after them. Adapters without a terminator need not call it.
   */
  readonly onTerminator?: (() => void) | undefined
}

/**
 * A failed upstream attempt. `retryable` is true for connect errors, timeouts, 429 and 5xx:
 * the router then tries the next candidate, as long as no byte reached the client.
 *
 * `message` is the gateway's own words (kind, status, which limit): it may reach spans and logs.
 * Whatever the provider said (its error body, an error event, what failed to decode) is in
 * `detail`, which may quote the credentials it was sent: only `logUpstreamFailure` reads it,
 * and redacts it.
 */
export class UpstreamError extends Data.TaggedError("UpstreamError")<{
  /** `unsupported`: the provider's kind cannot serve the operation (embeddings on a chat-only kind). */
  readonly kind: "connect" | "timeout" | "status" | "protocol" | "unsupported"
  readonly status?: number | undefined
  readonly message: string
  readonly retryable: boolean
  /** The provider's own text (a prefix of it), unredacted; never in a message, span or answer. */
  readonly detail?: string | undefined
}> {}

/** One embeddings attempt: the texts, in order, and the call's provider, credentials and limits. */
export interface EmbeddingCall {
  readonly baseUrl: string
  readonly apiKey: string
  readonly providerModelId: string
  readonly input: ReadonlyArray<string>
  /** The vectors' length when the caller asks for one (models that support shortening). */
  readonly dimensions?: number | undefined
  readonly user?: string | undefined
  readonly timeoutMs: number
  readonly headers?: Readonly<Record<string, string>> | undefined
}

/** One vector per input text, in the input's order; usage has no completion tokens. */
export interface EmbeddingAnswer {
  readonly vectors: ReadonlyArray<ReadonlyArray<number>>
  readonly usage: Usage
}

export interface UpstreamAdapter {
  /** Embeddings, on the kinds that serve them (absent: the kind cannot). */
  readonly embed?: ((call: EmbeddingCall) => Effect.Effect<EmbeddingAnswer, UpstreamError>) | undefined
  readonly complete: (call: UpstreamCall) => Effect.Effect<ChatCompletion, UpstreamError>
  /**
   * Succeeds once the upstream accepted the request (status and headers received), so the
   * router can still fail over; the stream then yields chunks. Adapters always ask the
   * upstream for usage and end the stream with a chunk that carries `usage` when the
   * upstream reported it. Interrupting the stream aborts the upstream request.
   */
  readonly stream: (call: UpstreamCall) => Effect.Effect<Stream.Stream<ChatChunk, UpstreamError>, UpstreamError>
}
