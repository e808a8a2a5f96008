// Responses API wire shapes (OpenAI-compatible): the request, the input and output items, the
// response object and the streaming events.
import { Schema } from "effect"
import { FunctionTool as ChatFunctionTool, ResponseFormat, ToolChoice } from "./Chat.js"

const Role = Schema.Literal("user", "assistant", "system", "developer")

const ContentPart = Schema.Struct({
  type: Schema.Literal("input_text", "output_text", "text"),
  text: Schema.String
})

/** `{role, content}` (the SDK may add `type: "message"`). */
export const MessageItem = Schema.Struct({
  type: Schema.optional(Schema.Literal("message")),
  role: Role,
  content: Schema.Union(Schema.String, Schema.Array(ContentPart))
})

export const FunctionCallOutputItem = Schema.Struct({
  type: Schema.Literal("function_call_output"),
  call_id: Schema.String,
  output: Schema.String
})

/** A function call of an earlier turn, replayed by clients that manage their own context. */
export const FunctionCallItem = Schema.Struct({
  type: Schema.Literal("function_call"),
  call_id: Schema.String,
  name: Schema.String,
  arguments: Schema.String,
  id: Schema.optional(Schema.String)
})

export const InputItem = Schema.Union(FunctionCallOutputItem, FunctionCallItem, MessageItem)
export type InputItem = typeof InputItem.Type

export const FunctionTool = Schema.Struct({
  type: Schema.Literal("function"),
  name: ChatFunctionTool.fields.function.fields.name,
  description: Schema.optional(Schema.NullOr(Schema.String)),
  parameters: Schema.optional(Schema.NullOr(Schema.Record({ key: Schema.String, value: Schema.Unknown }))),
  strict: Schema.optional(Schema.NullOr(Schema.Boolean))
})

/** Hosted tool items: recognised so they get a clear answer (executed by the tool service). */
export const McpTool = Schema.Struct({
  type: Schema.Literal("mcp"),
  server_label: Schema.String,
  server_url: Schema.String,
  authorization: Schema.optional(Schema.String),
  require_approval: Schema.optional(Schema.String),
  allowed_tools: Schema.optional(Schema.Array(Schema.String))
})

const ResponsesToolChoice = Schema.Union(
  ToolChoice,
  Schema.Struct({ type: Schema.Literal("function"), name: Schema.String })
)

export const ResponsesRequest = Schema.Struct({
  model: Schema.String.pipe(Schema.minLength(1)),
  input: Schema.Union(Schema.String, Schema.Array(InputItem)),
  instructions: Schema.optional(Schema.NullOr(Schema.String)),
  tools: Schema.optional(Schema.Array(Schema.Union(FunctionTool, McpTool))),
  tool_choice: Schema.optional(ResponsesToolChoice),
  previous_response_id: Schema.optional(Schema.NullOr(Schema.String)),
  thread_id: Schema.optional(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200))),
  stream: Schema.optional(Schema.Boolean),
  temperature: Schema.optional(Schema.Number.pipe(Schema.between(0, 2))),
  top_p: Schema.optional(Schema.Number.pipe(Schema.between(0, 1))),
  max_output_tokens: Schema.optional(Schema.Int.pipe(Schema.positive())),
  response_format: Schema.optional(ResponseFormat),
  /** The SDK's spelling of JSON mode: `text.format`. */
  text: Schema.optional(Schema.Struct({ format: Schema.optional(ResponseFormat) })),
  user: Schema.optional(Schema.String)
})
export type ResponsesRequest = typeof ResponsesRequest.Type

export const OutputText = Schema.Struct({
  type: Schema.Literal("output_text"),
  text: Schema.String,
  annotations: Schema.Array(Schema.Unknown)
})

export const OutputMessage = Schema.Struct({
  id: Schema.String,
  type: Schema.Literal("message"),
  role: Schema.Literal("assistant"),
  status: Schema.Literal("completed", "incomplete"),
  content: Schema.Array(OutputText)
})

export const OutputFunctionCall = Schema.Struct({
  id: Schema.String,
  type: Schema.Literal("function_call"),
  call_id: Schema.String,
  name: Schema.String,
  arguments: Schema.String,
  status: Schema.Literal("completed", "incomplete")
})

/** A hosted tool-app call the gateway executed inline (hybrid loop). */
export const OutputMcpCall = Schema.Struct({
  id: Schema.String,
  type: Schema.Literal("mcp_call"),
  server_label: Schema.String,
  name: Schema.String,
  arguments: Schema.String,
  output: Schema.NullOr(Schema.String),
  error: Schema.NullOr(Schema.String),
  status: Schema.Literal("completed", "failed")
})

export const OutputItem = Schema.Union(OutputMessage, OutputFunctionCall, OutputMcpCall)
export type OutputItem = typeof OutputItem.Type

export const ResponseUsage = Schema.Struct({
  input_tokens: Schema.Int,
  output_tokens: Schema.Int,
  total_tokens: Schema.Int
})

export const ResponseObject = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("response"),
  created_at: Schema.Int,
  status: Schema.Literal("completed", "incomplete", "in_progress"),
  model: Schema.String,
  output: Schema.Array(OutputItem),
  usage: Schema.NullOr(ResponseUsage),
  previous_response_id: Schema.NullOr(Schema.String),
  thread_id: Schema.NullOr(Schema.String),
  instructions: Schema.NullOr(Schema.String),
  error: Schema.Null,
  incomplete_details: Schema.NullOr(Schema.Struct({ reason: Schema.String })),
  tools: Schema.Array(Schema.Unknown),
  parallel_tool_calls: Schema.Boolean,
  tool_choice: Schema.Unknown,
  temperature: Schema.NullOr(Schema.Number),
  top_p: Schema.NullOr(Schema.Number),
  max_output_tokens: Schema.NullOr(Schema.Int),
  metadata: Schema.Record({ key: Schema.String, value: Schema.String })
})
export type ResponseObject = typeof ResponseObject.Type

/** The `{response_id}` of the stored-response routes. */
export const StoredResponsePath = Schema.Struct({ responseId: Schema.String })

/** DELETE /v1/responses/{id} (OpenAI shape). */
export const DeletedResponse = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("response"),
  deleted: Schema.Literal(true)
})

/**
 * An input item as GET /v1/responses/{id}/input_items lists it: the item as sent, with an `id`
 * (its own, else one derived from the response id and its position) and a `type`; a message's
 * string content becomes one `input_text` part (`output_text` for the assistant).
 */
export const ListedInputItem = Schema.Struct(
  { id: Schema.String, type: Schema.String },
  Schema.Record({ key: Schema.String, value: Schema.Unknown })
)
export type ListedInputItem = typeof ListedInputItem.Type

/** Query of GET /v1/responses/{id}/input_items: OpenAI's cursor pagination over the item ids. */
export const InputItemsQuery = Schema.Struct({
  limit: Schema.optionalWith(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100)), { default: () => 20 }),
  order: Schema.optionalWith(Schema.Literal("asc", "desc"), { default: () => "desc" as const }),
  after: Schema.optional(Schema.String.annotations({ description: "An item id: the page starts behind it" }))
})
export type InputItemsQuery = typeof InputItemsQuery.Type

/** OpenAI's list shape: `{object: "list", data, first_id, last_id, has_more}`. */
export const InputItemList = Schema.Struct({
  object: Schema.Literal("list"),
  data: Schema.Array(ListedInputItem),
  first_id: Schema.NullOr(Schema.String),
  last_id: Schema.NullOr(Schema.String),
  has_more: Schema.Boolean
})
