// A streamed call's tally: what its chunks carried (text, usage, the end), noted as the adapter
// yields each chunk, which also gives the chunk the gateway's id and model; and the Outcome the
// call is settled on, however the stream ends (completion, upstream drop, client disconnect).
import type { ChatChunk, Usage } from "../../schemas/Chat.js"
import { countEmittedPrefix, countTextTokens, EMITTED_TEXT_KEPT } from "../platform/Tokenizer.js"
import { type Admitted, estimatedUsage, type Outcome, UNTRUSTED_USAGE, usageInBounds } from "./InferenceSettlement.js"
import type { Candidate } from "./ProviderRouter.js"

const DROPPED = "upstream dropped mid-stream"

/**
 * A stream's emitted text, for the gateway's own count: memory per stream stays bounded, since
 * past EMITTED_TEXT_KEPT characters the older part is counted and let go.
 */
export class EmittedText {
  /** The text not counted yet: at most about EMITTED_TEXT_KEPT characters. */
  private text = ""
  /** Tokens of the text counted already (countEmittedPrefix). */
  private counted = 0
  add(text: string) {
    this.text += text
    if (this.text.length >= EMITTED_TEXT_KEPT) {
      const { tokens, rest } = countEmittedPrefix(this.text)
      this.counted += tokens
      this.text = rest
    }
  }
  tokens(): number {
    return this.counted + countTextTokens(this.text)
  }
}

/** A stream's log message: an upstream drop, usage out of bounds, both, or none. */
export const streamErrorMessage = (dropped: boolean, untrustedUsage: boolean): string | null =>
  untrustedUsage ? (dropped ? `${DROPPED}; ${UNTRUSTED_USAGE}` : UNTRUSTED_USAGE) : dropped ? DROPPED : null

export interface StreamTally {
  /**
   * Notes what the chunk carries (for the settlement) and gives it the gateway's id and model;
   * undefined: the chunk is not relayed (a usage-only chunk the client did not ask for).
   */
  readonly relabel: (chunk: ChatChunk) => ChatChunk | undefined
  /** The upstream failed mid-stream: the call is settled as an error. */
  readonly noteDrop: () => void
  readonly dropped: () => boolean
  /** The provider's terminator was read: no chunk comes after those in hand. */
  readonly noteTerminator: () => void
  readonly terminated: () => boolean
  /** The `created` of the last chunk (0: none yet), for the gateway's closing chunk. */
  readonly created: () => number
  /** What the stream carried so far, as the outcome of the candidate that served it. */
  readonly outcome: (candidate: Candidate) => Outcome
}

export const streamTally = (admitted: Admitted): StreamTally => {
  const emitted = new EmittedText()
  const state = {
    usage: null as Usage | null,
    /** The provider's usage when it was out of bounds (then `usage` is the gateway's count). */
    reported: null as Usage | null,
    dropped: false,
    terminated: false,
    done: false,
    created: 0,
    firstTokenAt: 0,
    /** The last finish reason the upstream sent (null: none yet). */
    finishReason: null as string | null
  }
  const includeUsage = admitted.request.stream_options?.include_usage === true

  const relabel = (chunk: ChatChunk): ChatChunk | undefined => {
    state.created = chunk.created
    for (const choice of chunk.choices) {
      if (state.firstTokenAt === 0 && (choice.delta.content ?? "") !== "") state.firstTokenAt = Date.now()
      if (choice.delta.content) emitted.add(choice.delta.content)
      for (const call of choice.delta.tool_calls ?? []) emitted.add(call.function?.arguments ?? "")
      if (choice.finish_reason !== null) {
        state.done = true
        state.finishReason = choice.finish_reason
      }
    }
    if (chunk.usage) {
      if (usageInBounds(chunk.usage)) {
        state.usage = chunk.usage
        state.reported = null
      } else {
        state.reported = chunk.usage
        state.usage = estimatedUsage(admitted, emitted.tokens())
      }
    }
    if (!includeUsage && chunk.choices.length === 0) return undefined // the usage-only chunk
    const relabeled = { ...chunk, id: admitted.requestId, model: admitted.request.model }
    if (chunk.usage == null || (includeUsage && state.reported === null)) return relabeled
    // Without include_usage no usage is relayed; with it, the usage the call is billed for.
    return { ...relabeled, usage: includeUsage ? state.usage ?? undefined : undefined }
  }

  const outcome = (candidate: Candidate): Outcome => {
    const trusted = state.reported === null ? state.usage : null
    const completion = trusted?.completion_tokens ?? emitted.tokens()
    const prompt = trusted?.prompt_tokens ?? admitted.promptEstimate
    return {
      candidate,
      usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion },
      method: trusted !== null ? "reported" : "estimated",
      status: state.dropped ? "error" : state.usage !== null || state.done ? "success" : "interrupted",
      errorMessage: streamErrorMessage(state.dropped, state.reported !== null),
      timeToFirstTokenMs: state.firstTokenAt === 0 ? undefined : state.firstTokenAt - admitted.startedAt,
      finishReasons: state.finishReason === null ? undefined : [state.finishReason],
      reportedUsage: state.reported ?? undefined
    }
  }

  return {
    relabel,
    noteDrop: () => void (state.dropped = true),
    dropped: () => state.dropped,
    noteTerminator: () => void (state.terminated = true),
    terminated: () => state.terminated,
    created: () => state.created,
    outcome
  }
}
