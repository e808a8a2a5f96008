// A streamed Messages call's tally: what the stream carried, noted as each event passes, and the
// Outcome it is settled on, however it ends. An `anthropic` upstream's events are relayed and read
// here (usage with its cache tokens from message_start and message_delta, the text of the deltas);
// a translated upstream's chat chunks are read by the chat tally (InferenceStream) before they are
// translated. Which one counts is the serving candidate's kind.
import type { StreamEvent } from "../../../schemas/Messages.js"
import type { Usage } from "../../../schemas/Chat.js"
import type { StreamAccount } from "../Inference.js"
import { type Admitted, type CacheUsage, estimatedUsage, type Outcome, usageInBounds } from "../InferenceSettlement.js"
import { EmittedText, streamErrorMessage, streamTally, type StreamTally } from "../InferenceStream.js"
import type { Candidate } from "../ProviderRouter.js"

const count = (value: unknown): number | undefined => (typeof value === "number" ? value : undefined)

const record = (value: unknown): Record<string, unknown> | undefined =>
  typeof value === "object" && value !== null ? (value as Record<string, unknown>) : undefined

export interface MessagesTally extends StreamAccount {
  /** Notes an `anthropic` upstream's event and gives it the gateway's id and model (message_start). */
  readonly relay: (event: StreamEvent) => StreamEvent
  /** The chat tally of translated upstreams (its relabel is the adapters' step). */
  readonly chat: StreamTally
  readonly dropped: () => boolean
}

export const messagesTally = (admitted: Admitted): MessagesTally => {
  const chat = streamTally(admitted)
  const emitted = new EmittedText()
  const state = {
    input: undefined as number | undefined,
    cacheRead: 0,
    cacheWrite: 0,
    output: undefined as number | undefined,
    /** message_delta arrived: its usage is the call's final count. */
    final: false,
    done: false,
    dropped: false,
    firstTokenAt: 0,
    stopReason: null as string | null
  }

  const noteUsage = (usage: Record<string, unknown> | undefined) => {
    if (usage === undefined) return
    state.input = count(usage.input_tokens) ?? state.input
    state.output = count(usage.output_tokens) ?? state.output
    state.cacheRead = count(usage.cache_read_input_tokens) ?? state.cacheRead
    state.cacheWrite = count(usage.cache_creation_input_tokens) ?? state.cacheWrite
  }
  const noteText = (text: unknown) => {
    if (typeof text !== "string" || text === "") return
    if (state.firstTokenAt === 0) state.firstTokenAt = Date.now()
    emitted.add(text)
  }

  const relay = (event: StreamEvent): StreamEvent => {
    switch (event.type) {
      case "message_start": {
        const message = record(event.message)
        noteUsage(record(message?.usage))
        return { ...event, message: { ...message, id: admitted.requestId, model: admitted.request.model } }
      }
      case "content_block_start": {
        const block = record(event.content_block)
        noteText(block?.text)
        return event
      }
      case "content_block_delta": {
        const delta = record(event.delta)
        noteText(delta?.text ?? delta?.partial_json ?? delta?.thinking)
        return event
      }
      case "message_delta": {
        state.final = true
        noteUsage(record(event.usage))
        const stop = record(event.delta)?.stop_reason
        if (typeof stop === "string") state.stopReason = stop
        return event
      }
      case "message_stop":
        state.done = true
        return event
      default:
        return event
    }
  }

  const nativeOutcome = (candidate: Candidate): Outcome => {
    const prompt = (state.input ?? 0) + state.cacheRead + state.cacheWrite
    const reported: Usage | null = state.final && state.input !== undefined && state.output !== undefined
      ? { prompt_tokens: prompt, completion_tokens: state.output, total_tokens: prompt + state.output }
      : null
    const trusted = reported !== null && usageInBounds(reported) ? reported : null
    const untrusted = reported !== null && trusted === null
    const cache: CacheUsage | undefined = trusted !== null && (state.cacheRead > 0 || state.cacheWrite > 0)
      ? { read: state.cacheRead, write: state.cacheWrite }
      : undefined
    const usage = trusted ?? estimatedUsage(admitted, emitted.tokens())
    return {
      candidate,
      usage,
      method: trusted !== null ? "reported" : "estimated",
      status: state.dropped ? "error" : state.final || state.done ? "success" : "interrupted",
      errorMessage: streamErrorMessage(state.dropped, untrusted),
      timeToFirstTokenMs: state.firstTokenAt === 0 ? undefined : state.firstTokenAt - admitted.startedAt,
      finishReasons: state.stopReason === null ? undefined : [state.stopReason],
      reportedUsage: untrusted ? reported ?? undefined : undefined,
      cache
    }
  }

  return {
    relay,
    chat,
    outcome: (candidate) => candidate.kind === "anthropic" ? nativeOutcome(candidate) : chat.outcome(candidate),
    noteDrop: () => {
      state.dropped = true
      chat.noteDrop()
    },
    dropped: () => state.dropped
  }
}
