// Server-sent events read from an upstream body (the parser all three HTTP adapters share), plus the
// helpers that turn provider events into OpenAI chat chunks, detect a truncated stream, and read message text.
import { Chunk, type Clock, Effect, Either, Option, type Stream } from "effect"
import { StringDecoder } from "node:string_decoder"
import type { ChatChunk, ChatCompletion, ChatMessage, ToolCall, Usage } from "../../../schemas/Chat.js"
import { objectId } from "../../lib/Ids.js"
import { pulledStream } from "../../lib/StreamPull.js"
import { logUpstreamFailure } from "./FailureLog.js"
import { type ByteSource, withoutBom } from "./Http.js"
import { defaultUpstreamLimits } from "./Limits.js"
import { type UpstreamCall, UpstreamError } from "./Upstream.js"

export interface SseEvent {
  /** The `event:` name; undefined for data-only streams (OpenAI chat). */
  readonly event: string | undefined
  readonly data: string
}

/**
 * An incremental SSE parser: bytes in as they arrive (UTF-8 split anywhere), complete events
 * out. Lines end with LF, CRLF or CR; a blank line dispatches the pending event (one with data
 * lines or an `event:` name), a line starting with `:` is a comment, and one leading byte order
 * mark is ignored. Lines are found with indexOf, not a character at a time: this runs on every
 * network read of every stream. Bytes are decoded by Node's StringDecoder: a streaming
 * TextDecoder takes ICU's slower path and builds a converter per stream (hot-path rule "linear
 * per-event work", docs/performance.md).
 *
 * A line, or one event's data, longer than `maxLineLength` characters is not kept: the parser
 * drops what it holds, sets `tooLong` and reads nothing more (its caller ends the stream).
 */
export class SseParser {
  constructor(private readonly maxLineLength: number = defaultUpstreamLimits.maxSseLineLength) {}
  /** A line or an event's data went past the limit: nothing more is parsed. */
  tooLong = false
  private readonly decoder = new StringDecoder("utf8")
  /** No text decoded yet: a byte order mark first in it is dropped. */
  private atStart = true
  /** The start of a line whose end has not arrived yet. */
  private partial = ""
  /** The last text ended with a CR: an LF first in the next one is the rest of that line end. */
  private afterCR = false
  /** The pending event's `event:` name and its data lines joined by LF (undefined: none yet). */
  private event: string | undefined = undefined
  private data: string | undefined = undefined

  /** The events these bytes complete. */
  push(bytes: Uint8Array): Array<SseEvent> {
    return this.text(this.firstText(this.decoder.write(bytes)))
  }

  /** End of input: a last line without its line end, and a last event without its blank line, still count. */
  end(): Array<SseEvent> {
    const events = this.text(this.firstText(this.decoder.end()))
    if (this.partial !== "") this.onLine(this.partial, events)
    this.partial = ""
    this.onLine("", events)
    return events
  }

  /** The text, without a byte order mark if it is the first text decoded. */
  private firstText(text: string): string {
    if (!this.atStart || text === "") return text
    this.atStart = false
    return withoutBom(text)
  }

  private text(text: string): Array<SseEvent> {
    const events: Array<SseEvent> = []
    if (text.length === 0 || this.tooLong) return events
    let start = this.afterCR && text.charCodeAt(0) === 0x0a ? 1 : 0
    this.afterCR = false
    let cr = text.indexOf("\r", start)
    let lf = text.indexOf("\n", start)
    while (cr !== -1 || lf !== -1) {
      const end = cr === -1 ? lf : lf === -1 ? cr : Math.min(cr, lf)
      this.onLine(this.partial === "" ? text.slice(start, end) : this.partial + text.slice(start, end), events)
      if (this.tooLong) return events
      this.partial = ""
      if (end === cr && end + 1 === text.length) this.afterCR = true // its LF may come first in the next text
      start = end === cr && text.charCodeAt(end + 1) === 0x0a ? end + 2 : end + 1
      if (cr !== -1 && cr < start) cr = text.indexOf("\r", start)
      if (lf !== -1 && lf < start) lf = text.indexOf("\n", start)
    }
    if (start < text.length) {
      this.partial += text.slice(start)
      if (this.partial.length > this.maxLineLength) this.overflow()
    }
    return events
  }

  /** Drops the line and the event in progress, for good. */
  private overflow() {
    this.tooLong = true
    this.partial = ""
    this.event = undefined
    this.data = undefined
  }

  private onLine(line: string, events: Array<SseEvent>) {
    if (line.length > this.maxLineLength) return this.overflow()
    if (line === "") {
      if (this.data !== undefined || this.event !== undefined) events.push({ event: this.event, data: this.data ?? "" })
      this.event = undefined
      this.data = undefined
      return
    }
    if (line.charCodeAt(0) === 0x3a) return // ":" a comment
    const colon = line.indexOf(":")
    const field = colon === -1 ? line : line.slice(0, colon)
    const value = colon === -1 ? "" : line.charCodeAt(colon + 1) === 0x20 ? line.slice(colon + 2) : line.slice(colon + 1)
    if (field === "data") {
      this.data = this.data === undefined ? value : `${this.data}\n${value}`
      if (this.data.length > this.maxLineLength) this.overflow()
    } else if (field === "event") this.event = value
  }
}

/** What one provider event contributes: chunks (chat chunks, or relayed events) to emit, and whether it was the terminator. */
export interface Step<A = ChatChunk> {
  readonly chunks: ReadonlyArray<A>
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

/** A line or an event past GATEWAY_UPSTREAM_MAX_SSE_LINE. Retryable: another candidate may stream sanely. */
export const lineTooLongError = (maxLineLength: number) =>
  new UpstreamError({
    kind: "protocol",
    message: `upstream SSE line or event exceeds ${maxLineLength} characters (GATEWAY_UPSTREAM_MAX_SSE_LINE); the stream was aborted`,
    retryable: true
  })

/** What sseChunks takes from the call: the caller's hooks, and what a failure's log names. */
export interface SseHooks<A = ChatChunk> extends Partial<Pick<UpstreamCall, "onEnd" | "onTerminator" | "apiKey" | "providerModelId">> {
  readonly step?: ((chunk: A) => A | undefined) | undefined
}

/**
 * A provider's SSE body as chat chunks, up to its terminator: read, parsed and translated in one
 * pull, a network read at a time (a pulled stream, layers/lib/StreamPull.ts: every Effect Stream
 * stage costs on each stream run and each batch, so reading, parsing, translating and stopping
 * are one pull, not a stage each). Reaching the terminator stops reading, and the body is closed
 * (the upstream request aborted) whenever the stream ends; input that ends before the terminator
 * fails with `truncatedError` after the chunks received, so a drop mid-stream always surfaces as
 * an UpstreamError; a failing event comes after the chunks of the events before it.
 *
 * The effect succeeds once the first chunks are in hand (or the body ended cleanly without any):
 * a failure before them (an error event, a line past `maxLineLength`, a drop) fails the attempt
 * itself, the body aborted, so the router can still fail over, as nothing reached the client.
 * A failure after them is logged here with the provider's redacted text (the router logs those
 * before), then ends the stream.
 */
export const sseChunks = <A = ChatChunk>(
  body: ByteSource,
  translate: (event: SseEvent) => Either.Either<Step<A>, UpstreamError>,
  /** The caller's per-chunk step and end (UpstreamCall.step and onEnd), applied here: no stages of their own. */
  hooks: SseHooks<A> = {},
  maxLineLength: number = defaultUpstreamLimits.maxSseLineLength
): Effect.Effect<Stream.Stream<A, UpstreamError>, UpstreamError> =>
  Effect.suspend(() => {
    const { step: stepOf, onEnd } = hooks
    const parser = new SseParser(maxLineLength)
    /** The terminator was seen, or the body ended: nothing more to read. */
    let done = false
    /** The first chunks were handed out with the stream: a failure now ends the stream, not the attempt. */
    let started = false
    /** What stopped the stream, waiting behind the chunks emitted before it. */
    let failure: UpstreamError | undefined
    /** Translates events until the terminator or a failure into `out`. */
    const translateAll = (events: ReadonlyArray<SseEvent>, out: Array<A>) => {
      for (const event of events) {
        const step = translate(event)
        if (Either.isLeft(step)) {
          failure = step.left
          return
        }
        for (const chunk of step.right.chunks) {
          const next = stepOf === undefined ? chunk : stepOf(chunk)
          if (next !== undefined) out.push(next)
        }
        if (step.right.done) {
          done = true
          hooks.onTerminator?.()
          return
        }
      }
    }
    /** The stream's end once it is due (its failure, or undefined after the terminator); none before. */
    const ending = (): Effect.Effect<undefined, UpstreamError> | undefined =>
      failure !== undefined ? failed(failure) : done ? Effect.succeed(undefined) : undefined
    const failed = (error: UpstreamError): Effect.Effect<never, UpstreamError> =>
      started
        ? error.detail === undefined ? Effect.fail(error) : Effect.zipRight(
          logUpstreamFailure(error, { model: hooks.providerModelId ?? "", apiKey: hooks.apiKey ?? "" }, "upstream failed mid-stream"),
          Effect.fail(error)
        )
        : Effect.zipRight(body.close(false), Effect.fail(error))
    /** The next batch of chunks (perhaps empty), or undefined at the end. */
    const pull: Effect.Effect<Chunk.Chunk<A> | undefined, UpstreamError> = Effect.suspend(() =>
      ending() ?? Effect.flatMap(body.read, (read) => {
        const out: Array<A> = []
        if (Option.isSome(read)) {
          for (const bytes of read.value) {
            translateAll(parser.push(bytes), out)
            if (failure !== undefined || done) break
            if (parser.tooLong) {
              failure = lineTooLongError(maxLineLength)
              break
            }
          }
        } else {
          translateAll(parser.end(), out)
          if (failure === undefined && !done) failure = truncatedError()
          done = true
        }
        // The chunks before a failure go out first; the failure (or the end) comes with the next pull.
        return out.length > 0 ? Effect.succeed(Chunk.unsafeFromArray(out)) : ending() ?? Effect.succeed(Chunk.empty())
      })
    )
    /** The stream that starts with the first batch (undefined: the body ended cleanly without chunks). */
    const startingWith = (batch: Chunk.Chunk<A> | undefined): Stream.Stream<A, UpstreamError> => {
      started = true
      // A short answer is often whole in the first read: then that batch is the stream, with no
      // pull of its end to run.
      const whole = batch !== undefined && done && failure === undefined
      return pulledStream({
        first: batch,
        rest: whole ? undefined : pull,
        end: (exit) => {
          // Complete: the terminator was read (not a failure, not an end before it).
          const closed = body.close(done && failure === undefined)
          return onEnd === undefined ? closed : Effect.zipRight(closed, onEnd(exit))
        }
      })
    }
    /** Pulls until the first chunks are in hand (or the body ended cleanly without any). */
    const first: Effect.Effect<Stream.Stream<A, UpstreamError>, UpstreamError> = Effect.flatMap(
      pull,
      (batch) => batch !== undefined && batch.length === 0 ? first : Effect.succeed(startingWith(batch))
    )
    return first
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

/** A completion id for upstreams that give none. */
export const completionId = (): string => objectId("chatcmpl-")

/** A translated completion's one choice: its text (null when only tool calls came back) and tool calls. */
export const assistantChoice = (
  text: string,
  toolCalls: ReadonlyArray<ToolCall>,
  finishReason: string
): ChatCompletion["choices"][number] => ({
  index: 0,
  message: {
    role: "assistant",
    content: text === "" && toolCalls.length > 0 ? null : text,
    ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {})
  },
  finish_reason: finishReason
})

const secondsOf = (clock: Clock.Clock) => Math.floor(clock.unsafeCurrentTimeMillis() / 1000)

// Both read the fiber's Clock (a test's TestClock too) in one access and one sync, not as maps
// over Clock.currentTimeMillis: every runtime operation here runs on every stream.
export const nowSeconds: Effect.Effect<number> = Effect.clockWith((clock) => Effect.sync(() => secondsOf(clock)))

export const initialMeta = (model: string): Effect.Effect<StreamMeta> =>
  Effect.clockWith((clock) => Effect.sync(() => ({ id: completionId(), model, created: secondsOf(clock) })))

/** The text of a chat message's content: a string, or its text parts joined. */
export const messageText = (content: ChatMessage["content"]): string =>
  content === undefined || content === null
    ? ""
    : typeof content === "string"
    ? content
    : content.map((part) => part.text ?? "").join("")
