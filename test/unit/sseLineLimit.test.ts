// The SSE parser's bound (GATEWAY_UPSTREAM_MAX_SSE_LINE): a line or an event's data past the limit
// is dropped and parsing stops, a line at the limit still parses; and what sseChunks makes of it:
// before the first chunk the attempt fails (the router may fail over), after it the stream fails.
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Either, Option, Stream } from "effect"
import type { ByteSource } from "../../layers/pipeline/upstream/Http.js"
import { emit, SseParser, sseChunks } from "../../layers/pipeline/upstream/Sse.js"
import { UpstreamError } from "../../layers/pipeline/upstream/Upstream.js"
import type { ChatChunk } from "../../schemas/Chat.js"

const bytes = (text: string) => new TextEncoder().encode(text)

describe("SseParser line limit", () => {
  it("a line at the limit parses; one character more is dropped and parsing stops", () => {
    const max = 100
    const atLimit = `data: ${"a".repeat(max - 6)}`
    const fits = new SseParser(max)
    expect(fits.push(bytes(`${atLimit}\n\n`))).toEqual([{ event: undefined, data: "a".repeat(max - 6) }])
    expect(fits.tooLong).toBe(false)

    const over = new SseParser(max)
    expect(over.push(bytes("data: first\n\n"))).toEqual([{ event: undefined, data: "first" }])
    // Split across reads, as a line that never ends arrives: the partial line is what grows.
    for (let i = 0; i < 10 && !over.tooLong; i++) expect(over.push(bytes(`${i === 0 ? "data: " : ""}${"a".repeat(30)}`))).toEqual([])
    expect(over.tooLong).toBe(true)
    // Nothing more comes out, even a well-formed event: the caller ends the stream.
    expect(over.push(bytes("\n\ndata: later\n\n"))).toEqual([])
    expect(over.end()).toEqual([])
  })

  it("a whole line past the limit that arrives in one read is dropped too", () => {
    const parser = new SseParser(100)
    expect(parser.push(bytes(`data: ${"a".repeat(95)}\n\ndata: next\n\n`))).toEqual([])
    expect(parser.tooLong).toBe(true)
  })

  it("the data of one event counts across its lines", () => {
    const parser = new SseParser(100)
    const events = parser.push(bytes(`${"data: 0123456789012345678901234567890123456789\n".repeat(3)}\n`))
    expect(events).toEqual([])
    expect(parser.tooLong).toBe(true)
  })

  it("events before the long line in the same read still come out", () => {
    const parser = new SseParser(50)
    expect(parser.push(bytes(`data: one\n\ndata: ${"x".repeat(60)}`))).toEqual([{ event: undefined, data: "one" }])
    expect(parser.tooLong).toBe(true)
  })
})

/** A body that gives `reads` one at a time, then ends; records how it was closed. */
const scriptedBody = (reads: ReadonlyArray<string>) => {
  const closed: Array<boolean> = []
  let next = 0
  const body: ByteSource = {
    read: Effect.sync(() => (next < reads.length ? Option.some([bytes(reads[next++]!)]) : Option.none())),
    close: (complete) => Effect.sync(() => void closed.push(complete))
  }
  return { body, closed }
}

const chunkOf = (text: string): ChatChunk => ({
  id: "c",
  object: "chat.completion.chunk",
  created: 1,
  model: "m",
  choices: [{ index: 0, delta: { content: text }, finish_reason: null }]
})
const translate = (event: { readonly data: string }) => Either.right(emit(chunkOf(event.data)))

describe("sseChunks and the line limit", () => {
  it.effect("a long line before any chunk fails the attempt itself, retryably, and aborts the body", () =>
    Effect.gen(function*() {
      const { body, closed } = scriptedBody(["data: ", "x".repeat(80), "x".repeat(80)])
      const error = yield* Effect.flip(sseChunks(body, translate, {}, 100))
      expect(error).toBeInstanceOf(UpstreamError)
      expect(error).toMatchObject({ kind: "protocol", retryable: true })
      expect(error.message).toContain("GATEWAY_UPSTREAM_MAX_SSE_LINE")
      expect(closed).toEqual([false])
    }))

  it.effect("after the first chunk, the stream yields it and then fails (a drop mid-stream)", () =>
    Effect.gen(function*() {
      const { body, closed } = scriptedBody(["data: hello\n\n", "data: ", "x".repeat(150)])
      const stream = yield* sseChunks(body, translate, {}, 100)
      const items = Chunk.toReadonlyArray(yield* Stream.runCollect(Stream.either(stream)))
      expect(items.filter(Either.isRight).map((r) => r.right.choices[0]?.delta.content)).toEqual(["hello"])
      const errors = items.filter(Either.isLeft).map((l) => l.left)
      expect(errors).toHaveLength(1)
      expect(errors[0]).toMatchObject({ kind: "protocol", retryable: true })
      expect(closed).toEqual([false])
    }))
})
