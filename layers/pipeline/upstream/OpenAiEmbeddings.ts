// The `openai` kind's embeddings: POST {baseUrl}/embeddings, floats asked for (every
// OpenAI-compatible server speaks them; the gateway encodes base64 itself), one vector per input
// in the input's order, within the answer limits.
import { Effect, Schema } from "effect"
import type { UpstreamLimits } from "./Limits.js"
import { defaultUpstreamLimits } from "./Limits.js"
import { joinUrl, jsonDecoder, mergeHeaders, postJson, protocolError } from "./Http.js"
import type { EmbeddingAnswer, EmbeddingCall, UpstreamError } from "./Upstream.js"
import { withCallSpan } from "../../lib/CurrentSpan.js"

// Counts are any JSON number here: whether the gateway believes them is Inference's rule.
const EmbeddingListWire = Schema.Struct({
  data: Schema.Array(Schema.Struct({
    index: Schema.Int,
    embedding: Schema.Array(Schema.Number)
  })),
  usage: Schema.optional(Schema.NullOr(Schema.Struct({
    prompt_tokens: Schema.Number,
    total_tokens: Schema.optional(Schema.Number)
  })))
})

const decodeList = jsonDecoder(EmbeddingListWire, "embedding list")

const body = (call: EmbeddingCall) => ({
  model: call.providerModelId,
  input: call.input,
  encoding_format: "float",
  ...(call.dimensions === undefined ? {} : { dimensions: call.dimensions }),
  ...(call.user === undefined ? {} : { user: call.user })
})

/** The vectors in input order: exactly one per input, each of the asked length when one was asked. */
const toAnswer = (wire: typeof EmbeddingListWire.Type, call: EmbeddingCall): Effect.Effect<EmbeddingAnswer, UpstreamError> => {
  if (wire.usage === undefined || wire.usage === null) return Effect.fail(protocolError("embedding list without usage"))
  const vectors: Array<ReadonlyArray<number>> = new Array(call.input.length)
  for (const item of wire.data) {
    if (item.index < 0 || item.index >= call.input.length || vectors[item.index] !== undefined) {
      return Effect.fail(protocolError("embedding list with an index out of range or repeated"))
    }
    if (call.dimensions !== undefined && item.embedding.length !== call.dimensions) {
      return Effect.fail(protocolError(`embedding of ${item.embedding.length} dimensions where ${call.dimensions} were asked`))
    }
    vectors[item.index] = item.embedding
  }
  if (wire.data.length !== call.input.length) return Effect.fail(protocolError("embedding list without one vector per input"))
  const prompt = wire.usage.prompt_tokens
  return Effect.succeed({ vectors, usage: { prompt_tokens: prompt, completion_tokens: 0, total_tokens: wire.usage.total_tokens ?? prompt } })
}

export const makeOpenAiEmbed = (limits: UpstreamLimits = defaultUpstreamLimits) => (call: EmbeddingCall) =>
  postJson({
    url: joinUrl(call.baseUrl, "/embeddings"),
    headers: mergeHeaders(call.headers, { authorization: `Bearer ${call.apiKey}` }),
    body: body(call),
    timeoutMs: call.timeoutMs
  }, limits.maxBodyBytes).pipe(
    Effect.flatMap(decodeList),
    Effect.flatMap((wire) => toAnswer(wire, call)),
    withCallSpan("Upstream.openai.embed", () => ({ "upstream.model": call.providerModelId }))
  )
