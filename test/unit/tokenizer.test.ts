// Prompt token counts: a message is counted once and then remembered (a conversation resends its
// history every turn, a system prompt comes with every call), with the same result as counting it
// again; the memory is bounded (least recently used dropped), for long and short texts apart.
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import {
  cachedCounter,
  countPromptTokens,
  countPromptTokensYielding,
  countTextTokens,
  countToolTokensYielding,
  IMAGE_TOKENS,
  toolsText
} from "../../layers/platform/Tokenizer.js"

describe("token counting", () => {
  it("counts a text once, and drops the least recently used past its bound", () => {
    const seen: Array<string> = []
    const count = cachedCounter((text) => {
      seen.push(text)
      return text.length
    }, { entries: 2, minChars: 10, shortEntries: 1 })
    const [a, b, c] = ["a".repeat(10), "b".repeat(11), "c".repeat(12)]
    expect([count(a), count(a), count("short"), count("short")]).toEqual([10, 10, 5, 5])
    expect(seen).toEqual([a, "short"])
    count("tiny") // one short text kept: "short" goes, the long ones stay
    expect([count("short"), count(a)]).toEqual([5, 10])
    expect(seen).toEqual([a, "short", "tiny", "short"])
    seen.length = 0
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

  it("an image part counts IMAGE_TOKENS on top of the text, in one go and in slices alike", async () => {
    const text = { role: "user" as const, content: [{ type: "text", text: "What is in this picture?" }] }
    const withImage = {
      role: "user" as const,
      content: [{ type: "text", text: "What is in this picture?" }, { type: "image_url", image_url: { url: "https://example.com/cat.png" } }]
    }
    expect(countPromptTokens([withImage])).toBe(countPromptTokens([text]) + IMAGE_TOKENS)
    expect(await Effect.runPromise(countPromptTokensYielding([withImage]))).toBe(countPromptTokens([withImage]))
  })

  it("tool definitions count as their JSON text, and nothing when there are none", async () => {
    const tools = [{
      type: "function" as const,
      function: { name: "get_weather", description: "The weather in a city", parameters: { type: "object", properties: { city: { type: "string" } } } }
    }]
    const text = toolsText(tools)
    expect(text).toBe(JSON.stringify(tools))
    expect(await Effect.runPromise(countToolTokensYielding(text))).toBe(countTextTokens(text))
    expect(await Effect.runPromise(countToolTokensYielding(text))).toBe(countTextTokens(text)) // from the cache
    const large = toolsText([{ ...tools[0], function: { ...tools[0]!.function, description: "a long description ".repeat(2_000) } }])
    expect(await Effect.runPromise(countToolTokensYielding(large))).toBe(countTextTokens(large))
    expect(toolsText(undefined)).toBe("")
    expect(toolsText([])).toBe("")
    expect(await Effect.runPromise(countToolTokensYielding(""))).toBe(0)
  })

  it("counts a special token's spelling as ordinary text", () => {
    expect(countTextTokens("hello <|endoftext|> world")).toBeGreaterThan(3)
    expect(countPromptTokens([{ role: "user", content: "quote: <|endoftext|>" }])).toBeGreaterThan(7)
  })
})
