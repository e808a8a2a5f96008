// Server-sent events over a byte Stream (the parser all three HTTP adapters share), plus the
// helpers that turn provider events into OpenAI chat chunks, detect a truncated stream, and read message text.
import { Clock, Effect, Option, Stream } from "effect"
import { randomBytes } from "node:crypto"
import type { ChatChunk, ChatMessage, Usage } from "../../schemas/Chat.js"
import { UpstreamError } from "./Upstream.js"

export interface SseEvent {
  /** The `event:` name; undefined for data-only streams (OpenAI chat). */
  readonly event: string | undefined
  readonly data: string
}

interface Pending {
  readonly event: string | undefined
  readonly data: ReadonlyArray<string>
}

const empty: Pending = { event: undefined, data: [] }

// One line of the SSE grammar: a blank line dispatches the pending event, `:` is a comment.
const step = (pending: Pending, line: string): readonly [Pending, Option.Option<SseEvent>] => {
  if (line === "") {
    return pending.data.length === 0 && pending.event === undefined
      ? [empty, Option.none()]
      : [empty, Option.some({ event: pending.event, data: pending.data.join("\n") })]
  }
  if (line.startsWith(":")) return [pending, Option.none()]
  const colon = line.indexOf(":")
  const field = colon === -1 ? line : line.slice(0, colon)
  const raw = colon === -1 ? "" : line.slice(colon + 1)
  const value = raw.startsWith(" ") ? raw.slice(1) : raw
  if (field === "data") return [{ event: pending.event, data: [...pending.data, value] }, Option.none()]
  if (field === "event") return [{ event: value, data: pending.data }, Option.none()]
  return [pending, Option.none()]
}

/** Parses a byte stream into SSE events; a final event without its blank line is still dispatched. */
export const parseSse = <E>(bytes: Stream.Stream<Uint8Array, E>): Stream.Stream<SseEvent, E> =>
  bytes.pipe(
    Stream.decodeText(),
    Stream.splitLines,
    Stream.concat(Stream.succeed("")),
    Stream.mapAccum(empty, step),
    Stream.filterMap((event) => event)
  )

/** What one provider event contributes: chunks to emit, and whether it was the terminator. */
export interface Step {
  readonly chunks: ReadonlyArray<ChatChunk>
  readonly done: boolean
}

export const emit = (...chunks: ReadonlyArray<ChatChunk>): Step => ({ chunks, done: false })
export const finished = (...chunks: ReadonlyArray<ChatChunk>): Step => ({ chunks, done: true })

export const truncatedError = () =>
  new UpstreamError({
    kind: "connect",
    message: "upstream stream ended before its terminator",
    retryable: true
  })

/**
 * Emits the chunks of each step up to the terminator, then stops (which aborts the upstream
 * request). A stream that ends without its terminator fails with `truncatedError`, so a drop
 * mid-stream always surfaces as an UpstreamError after the chunks already received.
 */
export const untilDone = (steps: Stream.Stream<Step, UpstreamError>): Stream.Stream<ChatChunk, UpstreamError> =>
  Stream.suspend(() => {
    let done = false
    return steps.pipe(
      Stream.takeUntil((s) => (done = s.done)),
      Stream.concat(Stream.suspend(() => (done ? Stream.empty : Stream.fail(truncatedError())))),
      Stream.mapConcat((s) => s.chunks)
    )
  })

/** Identity of the completion a stream's chunks belong to; adapters learn id/model from the first event. */
export interface StreamMeta {
  id: string
  model: string
  created: number
}

export const chunk = (
  meta: StreamMeta,
  delta: ChatChunk["choices"][number]["delta"],
  finishReason: string | null = null
): ChatChunk => ({
  id: meta.id,
  object: "chat.completion.chunk",
  created: meta.created,
  model: meta.model,
  choices: [{ index: 0, delta, finish_reason: finishReason }]
})

/** The trailing usage chunk (OpenAI's `include_usage` shape: no choices). */
export const usageChunk = (meta: StreamMeta, usage: Usage): ChatChunk => ({
  id: meta.id,
  object: "chat.completion.chunk",
  created: meta.created,
  model: meta.model,
  choices: [],
  usage
})

export const usageOf = (prompt: number, completion: number): Usage => ({
  prompt_tokens: prompt,
  completion_tokens: completion,
  total_tokens: prompt + completion
})

/** `chatcmpl-` + 24 random base64url chars, for upstreams that give no id. */
export const completionId = (): string => `chatcmpl-${randomBytes(18).toString("base64url")}`

export const nowSeconds: Effect.Effect<number> = Effect.map(Clock.currentTimeMillis, (ms) => Math.floor(ms / 1000))

export const initialMeta = (model: string): Effect.Effect<StreamMeta> =>
  Effect.map(nowSeconds, (created) => ({ id: completionId(), model, created }))

/** The text of a chat message's content: a string, or its text parts joined. */
export const messageText = (content: ChatMessage["content"]): string =>
  content === undefined || content === null
    ? ""
    : typeof content === "string"
    ? content
    : content.map((part) => part.text ?? "").join("")
