// Token counting stays linear and bounded whatever the text: BPE never gets a piece longer than
// PIECE_CHARS (its cost is the square of the length), counting in slices yields to the event
// loop and adds up to the same count, and a stream's emitted text is counted as it grows, to the
// same count, keeping only a bounded tail. Ordinary text counts exactly as the library does.
import { Effect } from "effect"
import { countTokens as libraryCount } from "gpt-tokenizer/encoding/o200k_base"
import { describe, expect, it } from "vitest"
import {
  boundedCounter,
  countEmittedPrefix,
  countPromptTokens,
  countPromptTokensYielding,
  countTextTokens,
  countTextTokensYielding,
  EMITTED_TEXT_KEPT,
  o200kCore,
  PIECE_CHARS,
  SLICE_CHARS
} from "../../layers/platform/Tokenizer.js"

const exact = (text: string) => libraryCount(text, { disallowedSpecial: new Set() })

/** A seeded generator (mulberry32): the same texts every run. */
const seeded = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}
const textOf = (random: () => number, length: number, alphabet: ReadonlyArray<string>) => {
  let text = ""
  while (text.length < length) text += alphabet[Math.floor(random() * alphabet.length)]
  return text
}
const LETTERS = [..."abcdefghijklmnopqrstuvwxyz"]

/** A counter over the real o200k core that records the length of every piece handed to BPE. */
const watched = () => {
  const pieces: Array<string> = []
  const counter = boundedCounter({
    ...o200kCore,
    encode: (piece) => {
      pieces.push(piece)
      return o200kCore.encode(piece)
    }
  })
  return { counter, pieces }
}

describe("bounded token counting", () => {
  it("never hands BPE a piece longer than PIECE_CHARS, whatever the run", () => {
    const random = seeded(1)
    const runs = {
      letters: textOf(random, 200_000, LETTERS),
      spaces: " ".repeat(50_000),
      bangs: "!".repeat(50_000),
      // One pre-token of punctuation followed by newlines and slashes, not a run of one class.
      slashes: "!" + "\n/".repeat(20_000),
      cjk: textOf(random, 30_000, [..."的一是不了人我在有他这为之大来以个中上们"]),
      emoji: textOf(random, 20_000, ["😀", "🚀", "🧪", "𝔘"])
    }
    for (const [name, text] of Object.entries(runs)) {
      const { counter, pieces } = watched()
      expect(counter.count(text), name).toBeGreaterThan(0)
      expect(pieces.length, name).toBeGreaterThan(text.length / PIECE_CHARS - 1)
      expect(Math.max(...pieces.map((p) => p.length)), name).toBeLessThanOrEqual(PIECE_CHARS)
      // No surrogate pair is cut in two.
      for (const piece of pieces) expect(/^[\udc00-\udfff]|[\ud800-\udbff]$/.test(piece), name).toBe(false)
    }
  })

  it("a 200k-letter run counts as the exact counts of its pieces", () => {
    const run = textOf(seeded(2), 200_000, LETTERS)
    let pieces = 0
    for (let at = 0; at < run.length; at += PIECE_CHARS) pieces += exact(run.slice(at, at + PIECE_CHARS))
    expect(countTextTokens(run)).toBe(pieces)
  })

  it("text with no long run counts exactly as the library counts it", () => {
    const random = seeded(3)
    const alphabet = [" ", "  ", "\n", "\r\n", "\t", "a", "Zz", "QUERY", "camelCase", "'s", "'ll", "1", "234", "!", "/", "...", "é", "\u0301", "的", "😀", "<|endoftext|>", " the", "\n\n"]
    for (let i = 0; i < 300; i++) {
      const text = textOf(random, 1 + Math.floor(random() * 2_000), alphabet)
      expect(countTextTokens(text)).toBe(exact(text))
    }
  })

  it("counting in slices yields to the event loop between slices and gives the same count", async () => {
    const random = seeded(4)
    const texts = {
      prose: textOf(random, SLICE_CHARS * 4, [...LETTERS, " ", ". ", "\n"]),
      // One pre-token: its pieces are sliced too.
      run: textOf(random, SLICE_CHARS * 4, LETTERS)
    }
    for (const [name, text] of Object.entries(texts)) {
      let done = false
      const counting = Effect.runPromise(countTextTokensYielding(text)).then((tokens) => {
        done = true
        return tokens
      })
      // Counted in one go, the count would be done before any other callback ran.
      await new Promise((resolve) => setImmediate(resolve))
      expect(done, name).toBe(false)
      expect(await counting, name).toBe(countTextTokens(text))
    }
  })

  it("a large prompt counted in slices counts as countPromptTokens does", async () => {
    const random = seeded(5)
    const messages = [
      { role: "system" as const, content: "You are terse." },
      { role: "user" as const, content: textOf(random, SLICE_CHARS * 3, [...LETTERS, " ", ", ", "\n"]) },
      ...Array.from({ length: 30 }, (_, i) => ({ role: "user" as const, content: `message ${i}: ${textOf(random, 700, [...LETTERS, " "])}` })),
      { role: "assistant" as const, content: null, tool_calls: [{ id: "c1", type: "function" as const, function: { name: "lookup", arguments: "{\"q\":\"ledger\"}" } }] }
    ]
    const yielding = await Effect.runPromise(countPromptTokensYielding(messages))
    expect(yielding).toBe(countPromptTokens(messages))
    expect(yielding).toBeGreaterThan(SLICE_CHARS)
  })
})

/** Feeds `text` as a stream would, in chunks of 1..maxChunk characters; the count and the longest text kept. */
const feed = (text: string, random: () => number, maxChunk: number) => {
  let counted = 0
  let kept = ""
  let longest = 0
  for (let at = 0; at < text.length;) {
    const size = 1 + Math.floor(random() * maxChunk)
    kept += text.slice(at, at + size)
    at += size
    if (kept.length >= EMITTED_TEXT_KEPT) {
      const { tokens, rest } = countEmittedPrefix(kept)
      counted += tokens
      kept = rest
    }
    longest = Math.max(longest, kept.length)
  }
  return { tokens: counted + countTextTokens(kept), longest }
}

describe("a stream's emitted text", () => {
  it("counted as it grows, ordinary text counts as the whole text, and only a bounded tail is kept", () => {
    const random = seeded(6)
    const prose = "The ledger keeps exact decimals; it rounds only on the invoice.\n\n  - item one\n  - item 'two'\n"
    const code = "const x = mergeRanges([{ start: 1, end: 3 }]) // 42\n\tif (a <= b) return 'ok'\n"
    const text = textOf(random, 200_000, [prose, code, "的一是不了人我在", " 1234 ", "😀 "])
    const whole = countTextTokens(text)
    const { tokens, longest } = feed(text, random, 40)
    expect(tokens).toBe(whole)
    expect(longest).toBeLessThan(EMITTED_TEXT_KEPT + 40)
  })

  it("whatever chunk boundaries, the part counted early never changes the count", () => {
    const random = seeded(7)
    const alphabets = [
      [" ", "\n", "\t", "\r", "a", "A", "!", "'", "'re", "1", "/"],
      [" ", " ", " ", "\n", "x", "X", "\u0301", "'", "s"],
      ["A", "B", "a", "b", "'", "d", "L", "l", " ", "\u0301", "1"]
    ]
    for (const alphabet of alphabets) {
      for (let i = 0; i < 400; i++) {
        const text = textOf(random, 20 + Math.floor(random() * 120), alphabet)
        let counted = 0
        let kept = ""
        for (let at = 0; at < text.length;) {
          const size = 1 + Math.floor(random() * 8)
          kept += text.slice(at, at + size)
          at += size
          if (random() < 0.4) {
            const { tokens, rest } = countEmittedPrefix(kept)
            counted += tokens
            kept = rest
          }
        }
        expect(counted + countTextTokens(kept), JSON.stringify(text)).toBe(countTextTokens(text))
      }
    }
  })

  it("one long run is counted as it grows too: the tail kept stays bounded, the count close", () => {
    const random = seeded(8)
    const run = textOf(random, 200_000, LETTERS)
    const { tokens, longest } = feed(run, random, 64)
    expect(longest).toBeLessThan(EMITTED_TEXT_KEPT + 64)
    const whole = countTextTokens(run)
    expect(Math.abs(tokens - whole)).toBeLessThan(whole * 0.01)
  })
})
