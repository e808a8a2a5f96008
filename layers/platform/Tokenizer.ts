// Token counting for pre-flight estimates and for usage the upstream did not report
// (interrupted streams): a real BPE tokenizer (o200k, gpt-tokenizer), never a char heuristic.
// Bounded: BPE costs the square of a pre-token's length, so no pre-token longer than
// PIECE_CHARS reaches it (a long run is counted in pieces), and large texts can be counted in
// slices that yield to the event loop.
import { Effect } from "effect"
import { O200K_TOKEN_SPLIT_REGEX } from "gpt-tokenizer/encodingParams/constants"
import { hash } from "node:crypto"
import { createRequire } from "node:module"
import type { ChatMessage } from "../../schemas/Chat.js"
import { loadTiktokenVocabulary, makeMergeCounter } from "./BpeVocabulary.js"

/** What counting needs of a BPE tokenizer: its pre-tokenizer, its vocabulary, its merge step. */
export interface BpeCore {
  /** The pre-tokenizer: a global Unicode regex whose matches are the pre-tokens, end to end. */
  readonly pretokens: RegExp
  /** The token a pre-token is, when it is one. */
  readonly rankOf: (pretoken: string) => number | undefined
  /** Tokens of a piece by byte-pair merges (cost grows with the square of its length). */
  readonly encode: (piece: string) => number
}

/**
 * o200k as a BpeCore: the library's pre-tokenizer and data file (gpt-tokenizer, pinned in
 * package.json), its vocabulary held in typed arrays (BpeVocabulary.ts), not in the library's
 * core. A pre-token's UTF-8 bytes are what is looked up and merged, as the library does.
 */
const o200kVocabulary = loadTiktokenVocabulary(createRequire(import.meta.url).resolve("gpt-tokenizer/data/o200k_base.tiktoken"))
const mergeCount = makeMergeCounter(o200kVocabulary)
const utf8 = new TextEncoder()
let scratch = new Uint8Array(1024)
/** A text's UTF-8 bytes in `scratch` (grown when needed); how many. */
const utf8Of = (text: string): number => {
  if (scratch.length < text.length * 3) scratch = new Uint8Array(text.length * 3)
  return utf8.encodeInto(text, scratch).written
}

export const o200kCore: BpeCore = {
  pretokens: O200K_TOKEN_SPLIT_REGEX,
  // A UTF-8 text is never shorter in bytes than in UTF-16 code units: a longer one is no token.
  rankOf: (pretoken) => {
    if (pretoken.length > o200kVocabulary.maxTokenBytes) return undefined
    const length = utf8Of(pretoken)
    const rank = o200kVocabulary.rankOf(scratch, 0, length)
    return rank === -1 ? undefined : rank
  },
  encode: (piece) => {
    const length = utf8Of(piece)
    return mergeCount(scratch, length)
  }
}

/**
 * The longest piece BPE is given, in UTF-16 code units. A pre-token is a run of letters, of
 * punctuation or of whitespace, so ordinary text has none this long and counts exactly; a
 * longer run (a DNA string, a padding line, a hostile prompt) is counted piece by piece, each
 * cut costing at most a token or so. Longer pieces cost more per character.
 */
export const PIECE_CHARS = 128

/** Characters of text counted in one go before the count yields to the event loop. */
export const SLICE_CHARS = 8_192
/**
 * A character merged by BPE weighs this many in a slice (a character that is a whole token, or
 * part of one found by lookup, weighs one): merging costs several times a lookup, so a slice of
 * text that is all merges (a hostile run) takes about as long as a slice of ordinary text.
 */
const MERGE_WEIGHT = 4

const isHighSurrogate = (code: number) => code >= 0xd800 && code <= 0xdbff

/** Where a count in slices stands: the next pre-token, or the next piece of a long one. */
interface CountCursor {
  /** Where the next pre-token starts. */
  next: number
  /** The next piece of a long pre-token (ending at `pretokenEnd`) still to count. */
  pieceAt: number
  pretokenEnd: number
  tokens: number
}
const countCursor = (): CountCursor => ({ next: 0, pieceAt: 0, pretokenEnd: 0, tokens: 0 })

/**
 * Counting over a BPE core that never hands it a pre-token longer than `pieceChars`: the
 * library's own loop (pre-tokenize, one token when the pre-token is one, else BPE) with long
 * pre-tokens cut into pieces. Texts with no long pre-token count exactly as the library does.
 */
export const boundedCounter = (core: BpeCore, pieceChars: number = PIECE_CHARS) => {
  // One regex for every count: a count runs to its end (or to its slice's end) without
  // yielding, and each starts by setting lastIndex.
  const pretokens = new RegExp(core.pretokens.source, core.pretokens.flags)

  /** Where the piece of `text` that starts at `at` ends, in a long pre-token ending at `end`. */
  const pieceEnd = (text: string, at: number, end: number): number => {
    const cut = Math.min(at + pieceChars, end)
    // A surrogate pair stays whole: half of one would count as a replacement character.
    return cut < end && cut - at > 1 && isHighSurrogate(text.charCodeAt(cut - 1)) ? cut - 1 : cut
  }

  const tokensOf = (pretoken: string): number => {
    if (core.rankOf(pretoken) !== undefined) return 1
    if (pretoken.length <= pieceChars) return core.encode(pretoken)
    let tokens = 0
    for (let at = 0; at < pretoken.length;) {
      const end = pieceEnd(pretoken, at, pretoken.length)
      tokens += core.encode(pretoken.slice(at, end))
      at = end
    }
    return tokens
  }

  /** Tokens of `text`. */
  const count = (text: string): number => {
    pretokens.lastIndex = 0
    let tokens = 0
    let match: RegExpExecArray | null
    while ((match = pretokens.exec(text)) !== null) tokens += tokensOf(match[0])
    return tokens
  }

  /**
   * Counts about `chars` more characters of `text` from where `cursor` stands, adding their
   * tokens to it; true when the text is counted to its end. A slice stops between pre-tokens or
   * between the pieces of a long one, so slices add up to `count(text)` exactly.
   */
  const countSlice = (text: string, cursor: CountCursor, chars: number): boolean => {
    let budget = chars
    while (true) {
      while (cursor.pieceAt < cursor.pretokenEnd) {
        if (budget <= 0) return false
        const end = pieceEnd(text, cursor.pieceAt, cursor.pretokenEnd)
        cursor.tokens += core.encode(text.slice(cursor.pieceAt, end))
        budget -= (end - cursor.pieceAt) * MERGE_WEIGHT
        cursor.pieceAt = end
      }
      if (cursor.next >= text.length) return true
      if (budget <= 0) return false
      pretokens.lastIndex = cursor.next
      const match = pretokens.exec(text)
      if (match === null) {
        cursor.next = text.length
        return true
      }
      const pretoken = match[0]
      cursor.next = pretokens.lastIndex
      if (core.rankOf(pretoken) !== undefined) {
        cursor.tokens += 1
        budget -= pretoken.length
      } else if (pretoken.length <= pieceChars) {
        cursor.tokens += core.encode(pretoken)
        budget -= pretoken.length * MERGE_WEIGHT
      } else {
        // A long pre-token: its pieces are counted by the loop above, within the budget.
        cursor.pieceAt = match.index
        cursor.pretokenEnd = cursor.next
      }
    }
  }

  /**
   * Tokens of the part of `text` that no text appended later can change, and the rest, to be
   * counted with what follows it: `tokens + count(rest + more)` is `count(text + more)`. The
   * pre-tokenizer reads at most a few characters past a pre-token, except through one run of
   * whitespace, which at most two more pre-tokens finish; so a pre-token is final once the one
   * two further on ends a margin before the end of the text. When the rest is still over
   * `keep` characters (the text ends in one long run), all but its last piece is counted too:
   * that cut is one a long run gets anyway.
   */
  const countFinalPrefix = (text: string, keep: number): { readonly tokens: number; readonly rest: string } => {
    const MARGIN = 8
    pretokens.lastIndex = 0
    let tokens = 0
    let committed = 0
    // The two pre-tokens read after the last committed one: their tokens and ends.
    let olderTokens = 0
    let olderEnd = -1
    let newerTokens = 0
    let newerEnd = -1
    let match: RegExpExecArray | null
    while ((match = pretokens.exec(text)) !== null) {
      const end = pretokens.lastIndex
      if (end + MARGIN >= text.length) break
      const counted = tokensOf(match[0])
      if (olderEnd >= 0) {
        tokens += olderTokens
        committed = olderEnd
      }
      olderTokens = newerTokens
      olderEnd = newerEnd
      newerTokens = counted
      newerEnd = end
    }
    let rest = text.slice(committed)
    if (rest.length > keep) {
      let cut = rest.length - pieceChars
      if (isHighSurrogate(rest.charCodeAt(cut - 1))) cut--
      tokens += count(rest.slice(0, cut))
      rest = rest.slice(cut)
    }
    return { tokens, rest }
  }

  return { count, countSlice, countFinalPrefix } as const
}

const bounded = boundedCounter(o200kCore)

/** Characters counted since the process started (the tokenizer's work; diagnostics and tests). */
let charactersCounted = 0
export const countedCharacters = (): number => charactersCounted

/** Tokens of one text (the library's count unless it holds a run longer than PIECE_CHARS). */
const countTokens = (text: string): number => {
  charactersCounted += text.length
  return bounded.count(text)
}

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

interface MemoOptions {
  readonly entries: number
  readonly minChars: number
  readonly shortEntries?: number
}

/**
 * Remembered counts (least recently used dropped past `entries` of each kind). Long texts are
 * remembered by their SHA-256, so the memory holds only their digests; short ones (under
 * `minChars`) by the text itself.
 */
const countMemo = ({ entries, minChars, shortEntries = entries }: MemoOptions) => {
  const long = lruCounts(entries)
  const short = lruCounts(shortEntries)
  return (text: string) => text.length < minChars ? { cache: short, key: text } : { cache: long, key: hash("sha256", text, "base64") }
}

const memoized = (slotOf: ReturnType<typeof countMemo>, count: (text: string) => number) => (text: string): number => {
  const { cache, key } = slotOf(text)
  const known = cache.get(key)
  if (known !== undefined) return known
  const counted = count(text)
  cache.set(key, counted)
  return counted
}

/**
 * `count` remembering its counts: a conversation resends its whole history with every call,
 * and counting it again each turn cost more CPU than the rest of the call; system prompts and
 * other short messages repeat across calls, and even a short text costs more to count (the
 * tokenizer's Unicode regex) than a Map lookup.
 */
export const cachedCounter = (count: (text: string) => number, options: MemoOptions) => memoized(countMemo(options), count)

// Short texts are at most 511 characters: 2,000 of them are at most about 2 MB. The prompt
// counts, in one go or in slices, share these.
const messageSlot = countMemo({ entries: 10_000, minChars: 512, shortEntries: 2_000 })
const countMessageTokens = memoized(messageSlot, countTokens)

const messageText = (message: ChatMessage): string => {
  const content = typeof message.content === "string"
    ? message.content
    : (message.content ?? []).map((part) => part.text ?? "").join("")
  const calls = (message.tool_calls ?? []).map((c) => c.function.name + c.function.arguments).join("")
  return content + calls
}

/** Characters of the text a prompt's count reads (contents, tool-call names and arguments), without reading it. */
export const promptChars = (messages: ReadonlyArray<ChatMessage>): number => {
  let chars = 0
  for (const message of messages) {
    if (typeof message.content === "string") chars += message.content.length
    else if (message.content != null) for (const part of message.content) chars += part.text?.length ?? 0
    if (message.tool_calls !== undefined) {
      for (const call of message.tool_calls) chars += call.function.name.length + call.function.arguments.length
    }
  }
  return chars
}

/**
 * What one image part is estimated at: about the most a provider bills for one image (OpenAI's
 * high detail tops out near 1,450 tokens, Anthropic's near 1,600). Its size is not read: the
 * estimate prices admission (the wallet check, a reservation), so it errs high, not low.
 */
export const IMAGE_TOKENS = 1_600

const imageParts = (message: ChatMessage): number => {
  if (typeof message.content === "string" || message.content == null) return 0
  let images = 0
  for (const part of message.content) if (part.image_url !== undefined) images++
  return images
}

/** Tokens of one message: its text, its images at IMAGE_TOKENS each, and a small framing overhead. */
const messageOverhead = (message: ChatMessage) => imageParts(message) * IMAGE_TOKENS + 4

/** Prompt tokens of a chat request's messages. */
export const countPromptTokens = (messages: ReadonlyArray<ChatMessage>): number =>
  messages.reduce((sum, m) => sum + countMessageTokens(messageText(m)) + messageOverhead(m), 3)

/** The text a request's tool definitions are counted on: their JSON, as count_tokens counts them ("" when none). */
export const toolsText = (tools: ReadonlyArray<unknown> | undefined): string =>
  tools === undefined || tools.length === 0 ? "" : JSON.stringify(tools)

/**
 * Tokens of tool definitions' text (toolsText), remembered as messages are (an agent sends the
 * same tools with every call), in slices that yield when it is large.
 */
export const countToolTokensYielding = (text: string): Effect.Effect<number> => {
  if (text === "") return Effect.succeed(0)
  const { cache, key } = messageSlot(text)
  const known = cache.get(key)
  if (known !== undefined) return Effect.succeed(known)
  return Effect.map(countTextTokensYielding(text), (counted) => {
    cache.set(key, counted)
    return counted
  })
}

export const countTextTokens = (text: string): number => text === "" ? 0 : countTokens(text)

/**
 * Lets the event loop run what is waiting (I/O, timers, other requests) before going on:
 * setImmediate runs after the pending I/O callbacks, where a microtask would not let them in.
 */
const yieldToEventLoop = Effect.async<void>((resume) => {
  const pending = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(pending))
})

/** Counts `text` in slices of SLICE_CHARS with a yield to the event loop after each. */
const countSliced = Effect.fnUntraced(function*(text: string) {
  charactersCounted += text.length
  const cursor = countCursor()
  while (!bounded.countSlice(text, cursor, SLICE_CHARS)) yield* yieldToEventLoop
  return cursor.tokens
})

/**
 * countTextTokens for a text of any size: the same count, in slices that yield to the event
 * loop, so a large text does not hold up everyone else's requests while it is counted.
 */
export const countTextTokensYielding = (text: string): Effect.Effect<number> =>
  text.length <= SLICE_CHARS ? Effect.sync(() => countTextTokens(text)) : countSliced(text)

/**
 * countPromptTokens for a prompt of any size: the same count (remembered counts included),
 * yielding to the event loop after each SLICE_CHARS counted. For prompts over SLICE_CHARS;
 * smaller ones take countPromptTokens, with no effect at all.
 */
export const countPromptTokensYielding = Effect.fnUntraced(function*(messages: ReadonlyArray<ChatMessage>) {
  let total = 3
  let sinceYield = 0
  for (const message of messages) {
    const text = messageText(message)
    const { cache, key } = messageSlot(text)
    let counted = cache.get(key)
    if (counted === undefined) {
      if (text.length > SLICE_CHARS) {
        counted = yield* countSliced(text)
      } else {
        counted = countTokens(text)
        sinceYield += text.length
        if (sinceYield >= SLICE_CHARS) {
          sinceYield = 0
          yield* yieldToEventLoop
        }
      }
      cache.set(key, counted)
    }
    total += counted + messageOverhead(message)
  }
  return total
})

/**
 * Past this many characters a stream's emitted text is counted up to its final part (see
 * countEmittedPrefix), so a stream keeps at most about this much text, whatever it emits.
 */
export const EMITTED_TEXT_KEPT = 16_384

/**
 * The tokens of a stream's emitted text that later chunks cannot change, and the text to keep:
 * `tokens + countTextTokens(rest + later)` counts as `countTextTokens(text + later)` would
 * (exactly for ordinary text). Called when the kept text passes EMITTED_TEXT_KEPT.
 */
export const countEmittedPrefix = (text: string): { readonly tokens: number; readonly rest: string } => {
  const counted = bounded.countFinalPrefix(text, EMITTED_TEXT_KEPT / 2)
  charactersCounted += text.length - counted.rest.length
  return counted
}
