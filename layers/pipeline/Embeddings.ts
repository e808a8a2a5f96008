// Embeddings: POST /v1/embeddings through the same pipeline as chat. The texts pass Inference's
// five pre-flight checks as the prompt of an `embedding` call (the model must serve embeddings;
// no output tokens are estimated), are routed with failover to the candidates' embeddings
// adapters, and the call is settled on its input tokens at the model's input price.
import { Effect } from "effect"
import type { ChatMessage, ChatRequest } from "../../schemas/Chat.js"
import type { EmbeddingList, EmbeddingRequest } from "../../schemas/Embeddings.js"
import { MAX_EMBEDDING_INPUTS } from "../../schemas/Embeddings.js"
import { ValidationError } from "../../schemas/Errors.js"
import { type Caller, Inference } from "./Inference.js"
import type { Candidate } from "./ProviderRouter.js"
import { UpstreamAdapters } from "./upstream/Adapters.js"
import { type EmbeddingAnswer, UpstreamError } from "./upstream/Upstream.js"

const invalidInput = (param: string, message: string) => new ValidationError({ code: "validation_error", param, message: `${param}: ${message}` })

/** The request's texts, in order; token ids are refused (the gateway counts and routes text). */
export const inputTexts = (input: EmbeddingRequest["input"]): Effect.Effect<ReadonlyArray<string>, ValidationError> => {
  const items = typeof input === "string" ? [input] : input
  if (items.length === 0) return Effect.fail(invalidInput("input", "must have at least 1 item(s)"))
  if (items.length > MAX_EMBEDDING_INPUTS) return Effect.fail(invalidInput("input", `must have at most ${MAX_EMBEDDING_INPUTS} item(s)`))
  const texts: Array<string> = []
  for (const [i, item] of items.entries()) {
    const param = typeof input === "string" ? "input" : `input.${i}`
    if (typeof item !== "string") return Effect.fail(invalidInput(param, "token ids are not supported; send the text"))
    if (item.length === 0) return Effect.fail(invalidInput(param, "must not be empty"))
    texts.push(item)
  }
  return Effect.succeed(texts)
}

/** The texts as the prompt admission measures (one user message each): size, token estimate. */
const asPrompt = (model: string, texts: ReadonlyArray<string>): ChatRequest => ({
  model,
  messages: texts.map((text): ChatMessage => ({ role: "user", content: text })) as unknown as ChatRequest["messages"]
})

/** A vector as float32 values: what `float` answers, and what `base64` encodes (so both agree). */
const float32 = (vector: ReadonlyArray<number>): Array<number> => vector.map(Math.fround)

/** The base64 of a vector's little-endian float32 bytes (OpenAI's `base64` encoding). */
export const base64Vector = (vector: ReadonlyArray<number>): string => {
  const bytes = Buffer.alloc(vector.length * 4)
  vector.forEach((value, i) => bytes.writeFloatLE(value, i * 4))
  return bytes.toString("base64")
}

const cannotEmbed = (candidate: Candidate) =>
  new UpstreamError({ kind: "unsupported", message: `provider kind ${candidate.kind} cannot serve embeddings`, retryable: true })

export class Embeddings extends Effect.Service<Embeddings>()("gateway/Embeddings", {
  dependencies: [Inference.Default, UpstreamAdapters.layer],
  effect: Effect.gen(function*() {
    const inference = yield* Inference
    const adapters = yield* UpstreamAdapters

    /** The five checks, routing with failover, settlement; gives the list and what admission decided (its rate-limit state). */
    const create = Effect.fnUntraced(function*(caller: Caller, request: EmbeddingRequest) {
      const texts = yield* inputTexts(request.input)
      const admitted = yield* inference.admit(caller, asPrompt(request.model, texts), "embedding")
      const { value, usage } = yield* inference.serve(admitted, (candidate, call): Effect.Effect<EmbeddingAnswer, UpstreamError> => {
        const embed = adapters.get(candidate.kind).embed
        if (embed === undefined) return Effect.fail(cannotEmbed(candidate))
        return embed({ ...call, input: texts, dimensions: request.dimensions, user: request.user })
      })
      const base64 = request.encoding_format === "base64"
      const list: EmbeddingList = {
        object: "list",
        data: value.vectors.map((vector, index) => ({
          object: "embedding" as const,
          index,
          embedding: base64 ? base64Vector(vector) : float32(vector)
        })),
        model: request.model,
        usage: { prompt_tokens: usage.prompt_tokens, total_tokens: usage.total_tokens }
      }
      return { admitted, list }
    })

    return { create } as const
  })
}) {}
