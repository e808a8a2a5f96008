// A BPE vocabulary kept as bytes in typed arrays, and the byte-pair merge over it (tiktoken's
// algorithm, as gpt-tokenizer implements it). The library's own core holds o200k as a Map of
// 200,000 strings: about 15 MB of heap that every major garbage collection marks, and about
// 28 MB of the process's resident memory. Here the same vocabulary is about 4 MB of array
// buffers the collector never walks (docs/decisions.md "Token counting").
import { readFileSync } from "node:fs"

/** A vocabulary: the rank of a byte sequence, if it is a token. */
export interface BpeVocabulary {
  /** The longest token, in bytes. */
  readonly maxTokenBytes: number
  /** The rank of bytes[from, to), or -1 when they are not a token. */
  readonly rankOf: (bytes: Uint8Array, from: number, to: number) => number
}

const EMPTY = 0

/** FNV-1a over bytes[from, to). */
const hashOf = (bytes: Uint8Array, from: number, to: number): number => {
  let hash = 0x811c9dc5
  for (let i = from; i < to; i++) hash = Math.imul(hash ^ bytes[i]!, 0x01000193)
  return hash >>> 0
}

/**
 * Reads a `.tiktoken` file (a base64 token, a space and its rank per line) into one byte buffer
 * with each rank's offset, and an open-addressing table from a token's bytes to its rank + 1.
 */
export const loadTiktokenVocabulary = (path: string): BpeVocabulary => {
  const file = readFileSync(path)
  const entries: Array<{ readonly bytes: Buffer; readonly rank: number }> = []
  let maxRank = -1
  let totalBytes = 0
  for (let at = 0; at < file.length;) {
    let end = file.indexOf(10, at)
    if (end === -1) end = file.length
    const space = file.indexOf(32, at)
    if (space > at && space < end) {
      const bytes = Buffer.from(file.toString("latin1", at, space), "base64")
      const rank = Number(file.toString("latin1", space + 1, end))
      entries.push({ bytes, rank })
      if (rank > maxRank) maxRank = rank
      totalBytes += bytes.length
    }
    at = end + 1
  }

  const bytes = new Uint8Array(totalBytes)
  // starts[r]..ends[r]: rank r's bytes (a rank with no token has none).
  const starts = new Uint32Array(maxRank + 1)
  const ends = new Uint32Array(maxRank + 1)
  let size = 1
  while (size < entries.length * 2) size *= 2
  const mask = size - 1
  const table = new Int32Array(size)
  let written = 0
  let maxTokenBytes = 0
  for (const { bytes: token, rank } of entries) {
    bytes.set(token, written)
    starts[rank] = written
    ends[rank] = written + token.length
    written += token.length
    if (token.length > maxTokenBytes) maxTokenBytes = token.length
    let slot = hashOf(bytes, starts[rank]!, ends[rank]!) & mask
    while (table[slot] !== EMPTY) slot = (slot + 1) & mask
    table[slot] = rank + 1
  }

  const rankOf = (key: Uint8Array, from: number, to: number): number => {
    const length = to - from
    if (length > maxTokenBytes || length <= 0) return -1
    let slot = hashOf(key, from, to) & mask
    while (true) {
      const entry = table[slot]!
      if (entry === EMPTY) return -1
      const rank = entry - 1
      const start = starts[rank]!
      if (ends[rank]! - start === length) {
        let same = true
        for (let i = 0; i < length; i++) {
          if (bytes[start + i] !== key[from + i]) {
            same = false
            break
          }
        }
        if (same) return rank
      }
      slot = (slot + 1) & mask
    }
  }
  return { maxTokenBytes, rankOf }
}

/**
 * Counts the tokens of bytes[0, length) by byte-pair merges: every adjacent pair's rank, then the
 * lowest-ranked pair (the first of equals) merged, until no pair is a token. Every single byte is
 * a token of the vocabularies this is used with, so the parts left are the tokens. Costs the
 * square of the length: callers bound it (layers/platform/Tokenizer.ts PIECE_CHARS).
 */
export const makeMergeCounter = (vocabulary: BpeVocabulary) => {
  let starts = new Int32Array(64)
  let ranks = new Float64Array(64)
  /** The rank of parts i and i + 1 merged (Infinity: no such token, or no part i + 1). */
  const rankOfPair = (piece: Uint8Array, i: number, parts: number): number => {
    if (i + 2 >= parts) return Infinity
    const rank = vocabulary.rankOf(piece, starts[i]!, starts[i + 2]!)
    return rank === -1 ? Infinity : rank
  }
  return (piece: Uint8Array, length: number): number => {
    if (length <= 1) return length
    if (starts.length < length + 1) {
      starts = new Int32Array(length * 2)
      ranks = new Float64Array(length * 2)
    }
    // Parts are [starts[i], starts[i + 1]); starts[parts - 1] is the end.
    let parts = length + 1
    for (let i = 0; i < parts; i++) starts[i] = i
    for (let i = 0; i < parts; i++) ranks[i] = rankOfPair(piece, i, parts)
    while (parts > 1) {
      let lowest = Infinity
      let at = -1
      for (let i = 0; i < parts - 1; i++) {
        if (ranks[i]! < lowest) {
          lowest = ranks[i]!
          at = i
        }
      }
      if (at === -1) break
      // Merge part `at` with the next: drop the boundary between them.
      starts.copyWithin(at + 1, at + 2, parts)
      ranks.copyWithin(at, at + 1, parts)
      parts--
      ranks[at] = rankOfPair(piece, at, parts)
      if (at > 0) ranks[at - 1] = rankOfPair(piece, at - 1, parts)
    }
    return parts - 1
  }
}
