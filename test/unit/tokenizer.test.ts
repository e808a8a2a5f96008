// Prompt token counts: a long message is counted once and then remembered (a conversation
// resends its history every turn), with the same result as counting it again; short ones are
// counted directly; the memory is bounded (least recently used dropped).
import { describe, expect, it } from "vitest"
import { cachedCounter, countPromptTokens, countTextTokens } from "../../layers/Tokenizer.js"

describe("token counting", () => {
  it("counts long texts once, short ones every time, and drops the least recently used past its bound", () => {
    const seen: Array<string> = []
    const count = cachedCounter((text) => {
      seen.push(text)
      return text.length
    }, { entries: 2, minChars: 10 })
    const [a, b, c] = ["a".repeat(10), "b".repeat(11), "c".repeat(12)]
    expect([count(a), count(a), count("short"), count("short")]).toEqual([10, 10, 5, 5])
    expect(seen).toEqual([a, "short", "short"])
    count(b)
    count(a) // a is now the most recently used
    count(c) // past the bound: b goes
    seen.length = 0
    expect([count(a), count(c), count(b)]).toEqual([10, 12, 11])
    expect(seen).toEqual([b])
  })

  it("a conversation counts the same on its first and its later turns", () => {
    const history = Array.from({ length: 12 }, (_, i) => ({
      role: i % 2 === 0 ? "user" as const : "assistant" as const,
      content: `Turn ${i}: ${"a fairly long message about the gateway's ledger and its budgets, ".repeat(12)}`
    }))
    const direct = history.reduce((sum, m) => sum + countTextTokens(m.content) + 4, 3)
    expect(countPromptTokens(history)).toBe(direct)
    expect(countPromptTokens(history)).toBe(direct) // from the cache
    const next = [...history, { role: "user" as const, content: "And one more question." }]
    expect(countPromptTokens(next)).toBe(direct + countTextTokens("And one more question.") + 4)
  })
})
