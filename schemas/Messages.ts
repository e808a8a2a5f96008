// Messages API wire shapes (Anthropic-compatible): the request POST /v1/messages accepts, the
// count_tokens request and answer, and the Anthropic error body. Unknown fields are tolerated:
// `anthropic` upstreams get the body as the client sent it (the model replaced), so fields the
// gateway does not read (cache_control, thinking, betas) still reach the provider.
import { Schema } from "effect"

const ImageSource = Schema.Struct({
  type: Schema.String,
  media_type: Schema.optional(Schema.String),
  data: Schema.optional(Schema.String),
  url: Schema.optional(Schema.String),
  file_id: Schema.optional(Schema.String)
})

/** A block inside a tool_result's content: text or image. */
const NestedBlock = Schema.Struct({
  type: Schema.String,
  text: Schema.optional(Schema.String),
  source: Schema.optional(ImageSource)
})

/** A content block: text, image, document, tool_use, tool_result, thinking, and any other type (passed to `anthropic` upstreams). */
export const ContentBlock = Schema.Struct({
  type: Schema.String,
  text: Schema.optional(Schema.String),
  source: Schema.optional(ImageSource),
  title: Schema.optional(Schema.NullOr(Schema.String)),
  id: Schema.optional(Schema.String),
  name: Schema.optional(Schema.String),
  input: Schema.optional(Schema.Unknown),
  tool_use_id: Schema.optional(Schema.String),
  content: Schema.optional(Schema.Union(Schema.String, Schema.Array(NestedBlock))),
  is_error: Schema.optional(Schema.Boolean)
})
export type ContentBlock = typeof ContentBlock.Type

export const InputMessage = Schema.Struct({
  role: Schema.Literal("user", "assistant"),
  content: Schema.Union(Schema.String, Schema.Array(ContentBlock))
})
export type InputMessage = typeof InputMessage.Type

export const SystemPrompt = Schema.Union(
  Schema.String,
  Schema.Array(Schema.Struct({ type: Schema.Literal("text"), text: Schema.String }))
)

/** A tool: a client tool (`custom`, or no type) with its input schema, or a server tool of the provider's (typed). */
export const Tool = Schema.Struct({
  type: Schema.optional(Schema.String),
  name: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(128)),
  description: Schema.optional(Schema.String),
  input_schema: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
})
export type Tool = typeof Tool.Type

export const ToolChoice = Schema.Struct({
  type: Schema.Literal("auto", "any", "tool", "none"),
  name: Schema.optional(Schema.String),
  disable_parallel_tool_use: Schema.optional(Schema.Boolean)
})

const messageFields = {
  model: Schema.String.pipe(Schema.minLength(1)),
  messages: Schema.NonEmptyArray(InputMessage),
  system: Schema.optional(SystemPrompt),
  tools: Schema.optional(Schema.Array(Tool)),
  tool_choice: Schema.optional(ToolChoice),
  /** Extended thinking: passed to `anthropic` upstreams, ignored by translated ones. */
  thinking: Schema.optional(Schema.Unknown)
}

/** POST /v1/messages body. */
export const MessagesRequest = Schema.Struct({
  ...messageFields,
  max_tokens: Schema.Int.pipe(Schema.positive()),
  stream: Schema.optional(Schema.Boolean),
  temperature: Schema.optional(Schema.Number.pipe(Schema.between(0, 1))),
  top_p: Schema.optional(Schema.Number.pipe(Schema.between(0, 1))),
  top_k: Schema.optional(Schema.Int.pipe(Schema.nonNegative())),
  stop_sequences: Schema.optional(Schema.Array(Schema.String)),
  metadata: Schema.optional(Schema.Struct({ user_id: Schema.optional(Schema.NullOr(Schema.String)) }))
})
export type MessagesRequest = typeof MessagesRequest.Type

/** POST /v1/messages/count_tokens body. */
export const CountTokensRequest = Schema.Struct(messageFields)
export type CountTokensRequest = typeof CountTokensRequest.Type

/** The Messages API usage block (cache fields null when the upstream has no prompt cache). */
export interface MessageUsage {
  readonly input_tokens: number
  readonly output_tokens: number
  readonly cache_creation_input_tokens: number | null
  readonly cache_read_input_tokens: number | null
}

export type OutputBlock =
  | { readonly type: "text"; readonly text: string }
  | { readonly type: "tool_use"; readonly id: string; readonly name: string; readonly input: unknown }

/** A Messages API answer (the shape the gateway makes when it translates; `anthropic` upstreams' answers are relayed). */
export interface Message {
  readonly id: string
  readonly type: "message"
  readonly role: "assistant"
  readonly model: string
  readonly content: ReadonlyArray<OutputBlock>
  readonly stop_reason: string | null
  readonly stop_sequence: string | null
  readonly usage: MessageUsage
}

/** One streamed event: its `type` is the SSE event name; the rest as Anthropic defines it. */
export interface StreamEvent {
  readonly type: string
  readonly [field: string]: unknown
}

/**
 * Anthropic's error body, with the gateway's error code (`error.code`, e.g. `budget_exhausted`)
 * and the field at fault (`error.param`) beside Anthropic's `type`.
 */
export interface MessagesErrorBody {
  readonly type: "error"
  readonly error: {
    readonly type: string
    readonly message: string
    readonly code: string | null
    readonly param: string | null
  }
}
