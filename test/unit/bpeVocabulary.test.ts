// The o200k vocabulary held in typed arrays (layers/platform/BpeVocabulary.ts) counts as the
// library's own core does: every token found by its bytes, and texts of every script, with
// whole tokens and merges, giving the library's exact count.
import { countTokens as libraryCount } from "gpt-tokenizer/encoding/o200k_base"
import { readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { expect, it } from "vitest"
import { loadTiktokenVocabulary, makeMergeCounter } from "../../layers/platform/BpeVocabulary.js"
import { countTextTokens } from "../../layers/platform/Tokenizer.js"

const dataFile = createRequire(import.meta.url).resolve("gpt-tokenizer/data/o200k_base.tiktoken")
const vocabulary = loadTiktokenVocabulary(dataFile)

it("finds every token of the data file by its bytes, and nothing else", () => {
  const lines = readFileSync(dataFile, "utf8").split("\n").filter((line) => line !== "")
  expect(lines.length).toBe(199_998)
  for (const line of lines) {
    const [token, rank] = line.split(" ")
    const bytes = Buffer.from(token!, "base64")
    expect(vocabulary.rankOf(bytes, 0, bytes.length)).toBe(Number(rank))
  }
  const padded = Buffer.concat([Buffer.from("xx"), Buffer.from(" hello"), Buffer.from("yy")])
  expect(vocabulary.rankOf(padded, 2, 8)).toBe(vocabulary.rankOf(Buffer.from(" hello"), 0, 6))
  expect(vocabulary.rankOf(Buffer.from("qzxqzxqzxqzx"), 0, 12)).toBe(-1)
  expect(vocabulary.rankOf(Buffer.alloc(vocabulary.maxTokenBytes + 1, 97), 0, vocabulary.maxTokenBytes + 1)).toBe(-1)
})

it("merges a byte string no token spells into the library's tokens", () => {
  const count = makeMergeCounter(vocabulary)
  expect(count(Buffer.from(""), 0)).toBe(0)
  expect(count(Buffer.from("a"), 1)).toBe(1)
  for (const word of ["antidisestablishmentarianism", "Pneumonoultramicroscopic", "qzxqzxqzxqzx", "日本語のテキスト", "🧪🚀😀"]) {
    const bytes = Buffer.from(word)
    expect(count(bytes, bytes.length)).toBe(libraryCount(word))
  }
})

/** A seeded generator (mulberry32): the same texts every run. */
const seeded = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

it("counts random texts of every script exactly as the library", () => {
  const random = seeded(7)
  const alphabet = [
    ..."abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    ..."  \n\t.,;:!?'\"()[]{}<>/\\|-_=+*&^%$#@~`",
    ..."éèàüößçñøåæœ", ..."абвгдежзий", ..."的一是不了人我在有他", ..."あいうえおカキクケコ", ..."가나다라마바사",
    ..."αβγδεζηθ", ..."אבגדהוזח", ..."ابتثجحخد", ..."कखगघङचछ",
    "😀", "🚀", "🧪", "👍🏽", "𝔘", "\u0301", "\u200d"
  ]
  for (let n = 0; n < 2_000; n++) {
    let text = ""
    const length = 1 + Math.floor(random() * 120)
    while (text.length < length) text += alphabet[Math.floor(random() * alphabet.length)]
    expect(countTextTokens(text), JSON.stringify(text)).toBe(libraryCount(text, { disallowedSpecial: new Set() }))
  }
})

it("a byte order mark is the token its bytes spell, as tiktoken counts it", () => {
  // o200k has EF BB BF as one token (5574). The library decodes token bytes with a TextDecoder
  // that drops a leading BOM, so it finds no such string and counts U+FEFF as two tokens.
  expect(vocabulary.rankOf(Buffer.from([0xef, 0xbb, 0xbf]), 0, 3)).toBe(5574)
  expect(countTextTokens("\ufeff")).toBe(1)
  expect(libraryCount("\ufeff")).toBe(2)
})
