// Embeddings wire shapes (OpenAI-compatible): the request POST /v1/embeddings accepts and the
// list it answers. `input` is decoded loosely (text, or token ids) so that what the gateway does
// not serve gets a 422 that says why (layers/pipeline/Embeddings.ts).
import { Schema } from "effect"

/** The most inputs one request may carry (OpenAI's limit). */
export const MAX_EMBEDDING_INPUTS = 2048

/** The longest vector a request may ask for. */
export const MAX_EMBEDDING_DIMENSIONS = 65_536

/** POST /v1/embeddings body. Unknown OpenAI fields are tolerated (ignored). */
export const EmbeddingRequest = Schema.Struct({
  model: Schema.String.pipe(Schema.minLength(1)),
  /** A text, or an array of texts; token ids (an array of integers, or of such arrays) are recognised to be refused clearly. */
  input: Schema.Union(Schema.String, Schema.Array(Schema.Union(Schema.String, Schema.Int, Schema.Array(Schema.Int)))),
  encoding_format: Schema.optional(Schema.Literal("float", "base64")),
  dimensions: Schema.optional(Schema.Int.pipe(Schema.between(1, MAX_EMBEDDING_DIMENSIONS))),
  user: Schema.optional(Schema.String)
})
export type EmbeddingRequest = typeof EmbeddingRequest.Type

export const Embedding = Schema.Struct({
  object: Schema.Literal("embedding"),
  index: Schema.Int,
  embedding: Schema.Union(Schema.Array(Schema.Number), Schema.String).annotations({
    description: "The vector: numbers (encoding_format float), or the base64 of its little-endian float32 bytes (base64)"
  })
})
export type Embedding = typeof Embedding.Type

export const EmbeddingList = Schema.Struct({
  object: Schema.Literal("list"),
  data: Schema.Array(Embedding),
  model: Schema.String,
  usage: Schema.Struct({ prompt_tokens: Schema.Int, total_tokens: Schema.Int })
})
export type EmbeddingList = typeof EmbeddingList.Type
