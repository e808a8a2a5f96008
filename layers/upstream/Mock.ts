// The `mock` adapter: deterministic and offline, for the demo and the benchmarks. It echoes
// the last user message and counts usage with a fixed rule, so results can be asserted exactly.
import { Duration, Effect, Option, Stream } from "effect"
import type { ChatCompletion, ChatRequest, Usage } from "../../schemas/Chat.js"
import { chunk, completionId, initialMeta, messageText, nowSeconds, usageChunk, usageOf } from "./Sse.js"
import type { UpstreamAdapter, UpstreamCall } from "./Upstream.js"

export interface MockOptions {
  /** Pause before the answer and between streamed chunks (benchmarks simulate latency with it). */
  readonly delay?: Duration.DurationInput | undefined
}

const lastUserText = (request: ChatRequest): string => {
  const user = [...request.messages].reverse().find((m) => m.role === "user")
  return user === undefined ? "" : messageText(user.content)
}

/** `echo: <text>`, or `{"echo":"<text>"}` in JSON mode so the answer stays valid JSON. */
export const mockReply = (request: ChatRequest): string => {
  const text = lastUserText(request)
  return request.response_format?.type === "json_object" ? JSON.stringify({ echo: text }) : `echo: ${text}`
}

const words = (text: string): ReadonlyArray<string> => text.split(/\s+/).filter((w) => w.length > 0)

/**
 * The usage rule: prompt tokens = ceil(total characters of all message texts / 4), at least 1;
 * completion tokens = number of whitespace-separated words of the reply (= streamed content chunks).
 */
export const mockUsage = (request: ChatRequest, reply: string): Usage => {
  const chars = request.messages.reduce((n, m) => n + messageText(m.content).length, 0)
  return usageOf(Math.max(1, Math.ceil(chars / 4)), words(reply).length)
}

const pause = (options: MockOptions) => options.delay === undefined ? Effect.void : Effect.sleep(options.delay)

export const makeMockAdapter = (options: MockOptions = {}): UpstreamAdapter => ({
  complete: Effect.fnUntraced(function*(call: UpstreamCall) {
    yield* pause(options)
    const reply = mockReply(call.request)
    const completion: ChatCompletion = {
      id: completionId(),
      object: "chat.completion",
      created: yield* nowSeconds,
      model: call.providerModelId,
      choices: [{ index: 0, message: { role: "assistant", content: reply }, finish_reason: "stop" }],
      usage: mockUsage(call.request, reply)
    }
    return completion
  }),
  stream: Effect.fnUntraced(function*(call: UpstreamCall) {
    const meta = yield* initialMeta(call.providerModelId)
    const reply = mockReply(call.request)
    // Each word chunk carries the whitespace before it, so concatenated deltas equal the reply.
    const pieces = reply.match(/\s*\S+(\s+$)?/g) ?? []
    const chunks = [
      chunk(meta, { role: "assistant", content: "" }),
      ...pieces.map((p) => chunk(meta, { content: p })),
      chunk(meta, {}, "stop"),
      usageChunk(meta, mockUsage(call.request, reply))
    ]
    const step = call.step
    const body = step === undefined ? Stream.fromIterable(chunks) : Stream.fromIterable(chunks).pipe(Stream.filterMap((c) => Option.fromNullable(step(c))))
    const paced = options.delay === undefined ? body : body.pipe(Stream.tap(() => pause(options)))
    const onEnd = call.onEnd
    return onEnd === undefined ? paced : paced.pipe(Stream.ensuringWith(onEnd))
  })
})

export const MockAdapter: UpstreamAdapter = makeMockAdapter()
