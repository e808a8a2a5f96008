// Token counting for pre-flight estimates and for usage the upstream did not report
// (interrupted streams): a real BPE tokenizer (o200k, gpt-tokenizer), never a char heuristic.
import { GptEncoding } from "gpt-tokenizer/GptEncoding"
import { createHash } from "node:crypto"
import { readFileSync } from "node:fs"
import { createRequire } from "node:module"
import type { ChatMessage } from "../schemas/Chat.js"

const strictUtf8 = new TextDecoder("utf8", { fatal: true })

/**
 * The o200k merge ranks, read from the package's `.tiktoken` data file (base64 token, space,
 * rank per line) in the shape its generated `bpeRanks` module has: the token as a string when
 * its bytes are exact UTF-8, else as its bytes. Reading the data file instead of importing that
 * 3 MB JavaScript module keeps its source text out of the heap (it would stay there for the
 * life of the process, doubled in size in the bundle).
 */
const o200kRanks = (): Array<string | Array<number>> => {
  const file = createRequire(import.meta.url).resolve("gpt-tokenizer/data/o200k_base.tiktoken")
  const ranks: Array<string | Array<number>> = []
  for (const line of readFileSync(file, "utf8").split("\n")) {
    if (line === "") continue
    const space = line.indexOf(" ")
    const bytes = Buffer.from(line.slice(0, space), "base64")
    ranks[Number(line.slice(space + 1))] = exactUtf8(bytes) ?? [...bytes]
  }
  return ranks
}

const exactUtf8 = (bytes: Buffer): string | undefined => {
  try {
    const text = strictUtf8.decode(bytes)
    return Buffer.byteLength(text) === bytes.length ? text : undefined
  } catch {
    return undefined
  }
}

const { countTokens } = GptEncoding.getEncodingApi("o200k_base", o200kRanks)

/**
 * `count` remembering the counts of long texts (by SHA-256, the least recently used dropped past
 * `entries`): a conversation resends its whole history with every call, and counting it again
 * each turn cost about 2.5 ms of CPU per call at 20,000 tokens. Short texts are counted directly
 * (a few microseconds), so the cache holds only what is worth it and stays small.
 */
export const cachedCounter = (
  count: (text: string) => number,
  { entries, minChars }: { readonly entries: number; readonly minChars: number }
) => {
  const counts = new Map<string, number>()
  return (text: string): number => {
    if (text.length < minChars) return count(text)
    const key = createHash("sha256").update(text).digest("base64")
    const known = counts.get(key)
    if (known !== undefined) {
      counts.delete(key) // most recently used last
      counts.set(key, known)
      return known
    }
    const counted = count(text)
    counts.set(key, counted)
    if (counts.size > entries) counts.delete(counts.keys().next().value!)
    return counted
  }
}

const countMessageTokens = cachedCounter(countTokens, { entries: 10_000, minChars: 512 })

const messageText = (message: ChatMessage): string => {
  const content = typeof message.content === "string"
    ? message.content
    : (message.content ?? []).map((part) => part.text ?? "").join("")
  const calls = (message.tool_calls ?? []).map((c) => c.function.name + c.function.arguments).join("")
  return content + calls
}

/** Prompt tokens of a chat request: content plus a small per-message framing overhead. */
export const countPromptTokens = (messages: ReadonlyArray<ChatMessage>): number =>
  messages.reduce((sum, m) => sum + countMessageTokens(messageText(m)) + 4, 3)

export const countTextTokens = (text: string): number => text === "" ? 0 : countTokens(text)
