// The gateway's prompt estimate against the library's exact count on a small corpus of real
// prompts (test/fixtures/prompts): exact for ordinary text (prose, code, JSON, markdown, CJK,
// base64, URLs); within a tight tolerance where a run is longer than PIECE_CHARS and is counted
// in pieces (a DNA sequence, a markdown table padded past it).
import { countTokens as libraryCount } from "gpt-tokenizer/encoding/o200k_base"
import { readFileSync } from "node:fs"
import { describe, expect, it } from "vitest"
import { countPromptTokens, countTextTokens } from "../../layers/platform/Tokenizer.js"

const exact = (text: string) => libraryCount(text, { disallowedSpecial: new Set() })
const prompt = (name: string) => readFileSync(new URL(`../fixtures/prompts/${name}`, import.meta.url), "utf8")

const ordinary = ["english.txt", "code.txt", "json.txt", "markdown.txt", "cjk.txt", "base64.txt", "urls.txt"]
const withLongRuns = ["dna.txt", "wide-table.txt"]

describe("prompt estimates on real prompts", () => {
  it.each(ordinary)("%s counts exactly", (name) => {
    const text = prompt(name)
    expect(countTextTokens(text)).toBe(exact(text))
    expect(countPromptTokens([{ role: "user", content: text }])).toBe(exact(text) + 7)
  })

  it.each(withLongRuns)("%s, with a run past PIECE_CHARS, is within 1% of the exact count", (name) => {
    const text = prompt(name)
    const estimate = countTextTokens(text)
    const reference = exact(text)
    expect(Math.abs(estimate - reference)).toBeLessThanOrEqual(Math.max(2, reference * 0.01))
  })
})
