// Token counting for pre-flight estimates and for usage the upstream did not report
// (interrupted streams): a real BPE tokenizer (o200k, gpt-tokenizer), never a char heuristic.
import { GptEncoding } from "gpt-tokenizer/GptEncoding"
import { hash } from "node:crypto"
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

const encoding = GptEncoding.getEncodingApi("o200k_base", o200kRanks)
/**
 * Text as ordinary text: a special token's spelling ("<|endoftext|>") in a message counts as
 * the tokens of its characters. The library's default throws on it, which made a message that
 * quotes one fail its call.
 */
const ordinary = { disallowedSpecial: new Set<string>() }
const countTokens = (text: string): number => encoding.countTokens(text, ordinary)

/** A Map bounded to `entries`, the least recently used dropped first. */
const lruCounts = (entries: number) => {
  const counts = new Map<string, number>()
  return {
    get: (key: string): number | undefined => {
      const known = counts.get(key)
      if (known !== undefined) {
        counts.delete(key) // most recently used last
        counts.set(key, known)
      }
      return known
    },
    set: (key: string, count: number) => {
      counts.set(key, count)
      if (counts.size > entries) counts.delete(counts.keys().next().value!)
    }
  }
}

/**
 * `count` remembering its counts (least recently used dropped past `entries` of each kind): a
 * conversation resends its whole history with every call, and counting it again each turn cost
 * about 2.5 ms of CPU per call at 20,000 tokens; system prompts and other short messages repeat
 * across calls, and even a short text costs 5-15 us to count (the tokenizer's Unicode regex),
 * against a Map lookup. Long texts are remembered by their SHA-256, so the cache holds only
 * their digests; short ones (under `minChars`) by the text itself.
 */
export const cachedCounter = (
  count: (text: string) => number,
  { entries, minChars, shortEntries = entries }: { readonly entries: number; readonly minChars: number; readonly shortEntries?: number }
) => {
  const long = lruCounts(entries)
  const short = lruCounts(shortEntries)
  return (text: string): number => {
    const [cache, key] = text.length < minChars ? [short, text] : [long, hash("sha256", text, "base64")]
    const known = cache.get(key)
    if (known !== undefined) return known
    const counted = count(text)
    cache.set(key, counted)
    return counted
  }
}

// Short texts are at most 511 characters: 2,000 of them are at most about 2 MB.
const countMessageTokens = cachedCounter(countTokens, { entries: 10_000, minChars: 512, shortEntries: 2_000 })

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
