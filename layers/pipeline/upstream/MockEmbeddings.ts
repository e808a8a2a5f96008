// The `mock` kind's embeddings: deterministic and offline. A text's vector depends on the text
// alone (the same text always gives the same vector, whatever else is in the batch): SHA-256 of
// the text and a block counter, each byte mapped to [-1, 1], scaled to unit length as OpenAI's
// are. MOCK_EMBEDDING_DIMENSIONS long unless `dimensions` asks otherwise. Usage follows the chat
// mock's rule: ceil(characters / 4) per text, at least 1.
import { Effect } from "effect"
import { createHash } from "node:crypto"
import type { Usage } from "../../../schemas/Chat.js"
import type { EmbeddingAnswer, EmbeddingCall } from "./Upstream.js"

export const MOCK_EMBEDDING_DIMENSIONS = 16

/** The mock's vector of a text, `dimensions` long, of unit length. */
export const mockVector = (text: string, dimensions: number): Array<number> => {
  const values: Array<number> = []
  for (let block = 0; values.length < dimensions; block++) {
    const digest = createHash("sha256").update(`${block}\u0000${text}`).digest()
    for (const byte of digest) {
      if (values.length === dimensions) break
      values.push(byte / 127.5 - 1)
    }
  }
  const norm = Math.sqrt(values.reduce((sum, v) => sum + v * v, 0))
  return norm === 0 ? values : values.map((v) => v / norm)
}

export const mockEmbeddingUsage = (input: ReadonlyArray<string>): Usage => {
  const prompt = input.reduce((sum, text) => sum + Math.max(1, Math.ceil(text.length / 4)), 0)
  return { prompt_tokens: prompt, completion_tokens: 0, total_tokens: prompt }
}

export const mockEmbed = (call: EmbeddingCall): Effect.Effect<EmbeddingAnswer> =>
  Effect.sync(() => {
    const dimensions = call.dimensions ?? MOCK_EMBEDDING_DIMENSIONS
    return { vectors: call.input.map((text) => mockVector(text, dimensions)), usage: mockEmbeddingUsage(call.input) }
  })
