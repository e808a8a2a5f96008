// Chat completions wire shapes (OpenAI-compatible): the request the gateway accepts, the
// completion it returns and the chunks it streams. Upstream adapters speak these too.
import { Schema } from "effect"

export const ToolCall = Schema.Struct({
  id: Schema.String,
  type: Schema.Literal("function"),
  function: Schema.Struct({ name: Schema.String, arguments: Schema.String })
})
export type ToolCall = typeof ToolCall.Type

/**
 * A content part: `text`, `image_url` (a URL or a data URL) or `file` (file_data, file_id; the
 * Responses API's file_url rides here too). Which upstream kinds take which: upstream/Support.ts.
 */
const ContentPart = Schema.Struct({
  type: Schema.String,
  text: Schema.optional(Schema.String),
  image_url: Schema.optional(Schema.Struct({
    url: Schema.String,
    detail: Schema.optional(Schema.Literal("auto", "low", "high"))
  })),
  file: Schema.optional(Schema.Struct({
    file_data: Schema.optional(Schema.String),
    file_id: Schema.optional(Schema.String),
    file_url: Schema.optional(Schema.String),
    filename: Schema.optional(Schema.String)
  }))
})
export type ContentPart = typeof ContentPart.Type

export const ChatMessage = Schema.Struct({
  role: Schema.Literal("system", "user", "assistant", "tool", "developer"),
  content: Schema.optional(Schema.NullOr(Schema.Union(Schema.String, Schema.Array(ContentPart)))),
  name: Schema.optional(Schema.String),
  tool_calls: Schema.optional(Schema.Array(ToolCall)),
  tool_call_id: Schema.optional(Schema.String)
})
export type ChatMessage = typeof ChatMessage.Type

export const FunctionTool = Schema.Struct({
  type: Schema.Literal("function"),
  function: Schema.Struct({
    name: Schema.String.pipe(Schema.pattern(/^[a-zA-Z0-9_-]{1,64}$/)),
    description: Schema.optional(Schema.String),
    parameters: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
    strict: Schema.optional(Schema.NullOr(Schema.Boolean))
  })
})
export type FunctionTool = typeof FunctionTool.Type

export const ToolChoice = Schema.Union(
  Schema.Literal("auto", "none", "required"),
  Schema.Struct({ type: Schema.Literal("function"), function: Schema.Struct({ name: Schema.String }) })
)

export const ResponseFormat = Schema.Union(
  Schema.Struct({ type: Schema.Literal("text", "json_object") }),
  Schema.Struct({ type: Schema.Literal("json_schema"), json_schema: Schema.Record({ key: Schema.String, value: Schema.Unknown }) })
)
export type ResponseFormat = typeof ResponseFormat.Type

const Penalty = Schema.Number.pipe(Schema.between(-2, 2))

/** POST /v1/chat/completions body. Unknown OpenAI fields are tolerated (ignored). */
export const ChatRequest = Schema.Struct({
  model: Schema.String.pipe(Schema.minLength(1)),
  messages: Schema.NonEmptyArray(ChatMessage),
  stream: Schema.optional(Schema.Boolean),
  temperature: Schema.optional(Schema.Number.pipe(Schema.between(0, 2))),
  top_p: Schema.optional(Schema.Number.pipe(Schema.between(0, 1))),
  max_tokens: Schema.optional(Schema.Int.pipe(Schema.positive())),
  max_completion_tokens: Schema.optional(Schema.Int.pipe(Schema.positive())),
  tools: Schema.optional(Schema.Array(FunctionTool)),
  tool_choice: Schema.optional(ToolChoice),
  parallel_tool_calls: Schema.optional(Schema.Boolean),
  response_format: Schema.optional(ResponseFormat),
  frequency_penalty: Schema.optional(Penalty),
  presence_penalty: Schema.optional(Penalty),
  stop: Schema.optional(Schema.Union(Schema.String, Schema.Array(Schema.String).pipe(Schema.maxItems(4)))),
  stream_options: Schema.optional(Schema.Struct({ include_usage: Schema.optional(Schema.Boolean) })),
  seed: Schema.optional(Schema.Int),
  user: Schema.optional(Schema.String)
})
export type ChatRequest = typeof ChatRequest.Type

export const Usage = Schema.Struct({
  prompt_tokens: Schema.Int,
  completion_tokens: Schema.Int,
  total_tokens: Schema.Int
})
export type Usage = typeof Usage.Type

export const ChatCompletion = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("chat.completion"),
  created: Schema.Int,
  model: Schema.String,
  choices: Schema.Array(Schema.Struct({
    index: Schema.Int,
    message: Schema.Struct({
      role: Schema.Literal("assistant"),
      content: Schema.NullOr(Schema.String),
      tool_calls: Schema.optional(Schema.Array(ToolCall))
    }),
    finish_reason: Schema.NullOr(Schema.String)
  })),
  usage: Usage
})
export type ChatCompletion = typeof ChatCompletion.Type

export const ToolCallDelta = Schema.Struct({
  index: Schema.Int,
  id: Schema.optional(Schema.String),
  type: Schema.optional(Schema.Literal("function")),
  function: Schema.optional(Schema.Struct({ name: Schema.optional(Schema.String), arguments: Schema.optional(Schema.String) }))
})

export const ChatChunk = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("chat.completion.chunk"),
  created: Schema.Int,
  model: Schema.String,
  choices: Schema.Array(Schema.Struct({
    index: Schema.Int,
    delta: Schema.Struct({
      role: Schema.optional(Schema.Literal("assistant")),
      content: Schema.optional(Schema.NullOr(Schema.String)),
      tool_calls: Schema.optional(Schema.Array(ToolCallDelta))
    }),
    finish_reason: Schema.NullOr(Schema.String)
  })),
  usage: Schema.optional(Schema.NullOr(Usage))
})
export type ChatChunk = typeof ChatChunk.Type

/** A hosted tool item (`type: mcp`): only /v1/responses accepts it; chat answers 422. */
export const HostedTool = Schema.Struct({ type: Schema.Literal("mcp") })

/** The chat body as decoded on the wire: hosted tools are recognised so they get a clear 422. */
export const ChatRequestBody = Schema.Struct({
  ...ChatRequest.fields,
  tools: Schema.optional(Schema.Array(Schema.Union(FunctionTool, HostedTool)))
})
export type ChatRequestBody = typeof ChatRequestBody.Type
