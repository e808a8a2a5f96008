// Responses: the Responses API on top of the shared inference pipeline (same five checks, same
// settlement, log rows of type `response`). Input items and stored chains become chat messages;
// the answer becomes output items; hosted tool-app tools run inline (the hybrid loop); every
// response is stored per end user.
import { PgClient } from "@effect/sql-pg"
import { Clock, Effect, Stream } from "effect"
import type { ChatChunk, ChatCompletion, ChatMessage, ChatRequest, FunctionTool, ToolCall, Usage } from "../../schemas/Chat.js"
import { Forbidden, NotFound, ValidationError } from "../../schemas/Errors.js"
import type { InputItem, OutputItem, ResponseObject, ResponsesRequest } from "../../schemas/Responses.js"
import { objectId } from "../lib/Ids.js"
import { toStorable } from "../lib/StorableText.js"
import { Listeners, mcpPublicUrl } from "../platform/Listeners.js"
import { type Caller, Inference } from "../pipeline/Inference.js"
import { type EndUserPrincipal, KeyAuth } from "../access/KeyAuth.js"
import { PERSONAL, PERSONAL_LABEL, ToolHost, type ToolListing } from "../tools/ToolHost.js"
import type { ToolResult } from "../tools/apps/ToolApp.js"

interface StoredResponse {
  readonly id: string
  readonly thread_id: string | null
  readonly input_items: ReadonlyArray<InputItem>
  readonly output_items: ReadonlyArray<OutputItem>
}

const itemId = (prefix: string) => objectId(`${prefix}_`)

const partsText = (content: string | ReadonlyArray<{ readonly text: string }>) =>
  typeof content === "string" ? content : content.map((p) => p.text).join("")

/** Input and output items, oldest first, as chat messages (function calls merge into one turn). */
export const toMessages = (items: ReadonlyArray<InputItem | OutputItem>): Array<ChatMessage> => {
  const messages: Array<ChatMessage> = []
  const pushCall = (call: ToolCall) => {
    const last = messages.at(-1)
    if (last !== undefined && last.role === "assistant") {
      messages[messages.length - 1] = { ...last, tool_calls: [...(last.tool_calls ?? []), call] }
    } else {
      messages.push({ role: "assistant", content: null, tool_calls: [call] })
    }
  }
  for (const item of items) {
    if (item.type === "function_call_output") {
      messages.push({ role: "tool", tool_call_id: item.call_id, content: item.output })
    } else if (item.type === "function_call") {
      pushCall({ id: item.call_id, type: "function", function: { name: item.name, arguments: item.arguments } })
    } else if (item.type === "mcp_call") {
      pushCall({ id: item.id, type: "function", function: { name: item.name, arguments: item.arguments } })
      messages.push({ role: "tool", tool_call_id: item.id, content: item.output ?? item.error ?? "" })
    } else if ("id" in item && item.type === "message") {
      messages.push({ role: "assistant", content: partsText(item.content) })
    } else if ("role" in item) {
      messages.push({ role: item.role, content: partsText(item.content) })
    }
  }
  return messages
}

/** A completion's message as output items: text first, then one item per function call. */
const toOutput = (content: string | null, toolCalls: ReadonlyArray<ToolCall>, status: "completed" | "incomplete"): Array<OutputItem> => [
  ...(content !== null && content !== ""
    ? [{ id: itemId("msg"), type: "message" as const, role: "assistant" as const, status, content: [{ type: "output_text" as const, text: content, annotations: [] }] }]
    : []),
  ...toolCalls.map((c) => ({
    id: itemId("fc"),
    type: "function_call" as const,
    call_id: c.id,
    name: c.function.name,
    arguments: c.function.arguments,
    status
  }))
]

const toUsage = (usage: Usage | null) =>
  usage === null ? null : { input_tokens: usage.prompt_tokens, output_tokens: usage.completion_tokens, total_tokens: usage.total_tokens }

/** The hybrid loop's cap: model turns per request (spec "Limits"). */
const MAX_ITERATIONS = 10
const NO_LIMITS = { rpm: null, tpm: null, rpd: null }

/** A hosted tool offered to the model: which app serves it, as which end user. */
interface HostedTarget {
  /** The app slug, or PERSONAL for the per-user URL. */
  readonly slug: string
  /** The item's `server_label`, as the mcp_call items name it. */
  readonly label: string
  readonly principal: EndUserPrincipal
}

/** An SSE message: `event:` + `data:` whose `type` is the event name. */
export interface ResponseEvent {
  readonly type: string
  readonly [key: string]: unknown
}

export class Responses extends Effect.Service<Responses>()("gateway/Responses", {
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const inference = yield* Inference
    const toolHost = yield* ToolHost
    const keyAuth = yield* KeyAuth
    const listeners = yield* Listeners
    const toolServiceUrl = Effect.provideService(mcpPublicUrl, Listeners, listeners)

    /** The end user a hosted tool item's `authorization` names: of the caller's platform (and the caller itself for end-user keys). */
    const hostedPrincipal = Effect.fnUntraced(function*(caller: Caller, authorization: string | undefined, param: string) {
      if (authorization === undefined) {
        return yield* new ValidationError({ code: "validation_error", param, message: "authorization is required: Bearer <END_USER_KEY>" })
      }
      const principal = yield* keyAuth.authenticate(authorization)
      const sameUser = principal._tag === "EndUserKey" && principal.platformId === caller.platformId &&
        (caller._tag !== "EndUserKey" || caller.endUserId === principal.endUserId)
      if (!sameUser) {
        return yield* new Forbidden({ code: "forbidden", param, message: "authorization must be an end-user key of the calling user" })
      }
      return principal
    })

    /**
     * Resolves the `type: mcp` items: validation, tool discovery over the tool service, allowed_tools.
     * `server_label` names an app (`{mcp_url}/mcp/<app>`), or is `gateway` for the per-user URL
     * `{mcp_url}/mcp` (skills and capability tools, unprefixed names).
     */
    const resolveHosted = Effect.fnUntraced(function*(caller: Caller, tools: NonNullable<ResponsesRequest["tools"]>) {
      const byName = new Map<string, HostedTarget>()
      const chatTools: Array<FunctionTool> = []
      const servers: Array<{ readonly label: string; readonly tools: ReadonlyArray<ToolListing> }> = []
      for (const [index, tool] of tools.entries()) {
        if (tool.type !== "mcp") continue
        const param = (field: string) => `tools.${index}.${field}`
        if (tool.require_approval !== undefined && tool.require_approval !== "never") {
          return yield* new ValidationError({
            code: "unsupported_tool_type",
            param: param("require_approval"),
            message: "Only require_approval \"never\" is supported"
          })
        }
        if (tool.server_label === PERSONAL) {
          return yield* new ValidationError({ code: "validation_error", param: param("server_label"), message: "server_label must not be empty" })
        }
        const slug = tool.server_label === PERSONAL_LABEL ? PERSONAL : tool.server_label
        const expected = slug === PERSONAL ? `${yield* toolServiceUrl}/mcp` : `${yield* toolServiceUrl}/mcp/${slug}`
        if (tool.server_url.replace(/\/+$/, "") !== expected) {
          return yield* new ValidationError({ code: "validation_error", param: param("server_url"), message: `server_url must be ${expected}` })
        }
        const principal = yield* hostedPrincipal(caller, tool.authorization, param("authorization"))
        const listing = yield* toolHost.listTools(principal, slug).pipe(
          Effect.catchTag("NotFound", () =>
            Effect.fail(new ValidationError({ code: "validation_error", param: param("server_label"), message: `The app '${tool.server_label}' is not active for this platform` })))
        )
        const allowed = tool.allowed_tools
        const offered = listing.filter((t) =>
          allowed === undefined || allowed.includes(t.name) ||
          (slug !== PERSONAL && allowed.includes(t.name.slice(tool.server_label.length + 1))))
        for (const t of offered) {
          byName.set(t.name, { slug, label: tool.server_label, principal })
          chatTools.push({ type: "function", function: { name: t.name, description: t.description, parameters: { ...t.inputSchema } } })
        }
        servers.push({ label: tool.server_label, tools: offered })
      }
      return { byName, chatTools, servers }
    })

    /** Runs one hosted call (metered by ToolHost); app errors become a failed mcp_call item. */
    const runHostedCall = Effect.fnUntraced(function*(target: HostedTarget, call: ToolCall) {
      let args: unknown
      try {
        args = JSON.parse(call.function.arguments === "" ? "{}" : call.function.arguments)
      } catch {
        args = null
      }
      const result: ToolResult = typeof args === "object" && args !== null && !Array.isArray(args)
        ? yield* toolHost.callTool(target.principal, target.slug, call.function.name, args as Record<string, unknown>).pipe(
          Effect.catchTag("NotFound", (e) => Effect.succeed<ToolResult>({ content: [{ type: "text", text: e.message }], isError: true }))
        )
        : { content: [{ type: "text", text: "The tool arguments are not a JSON object" }], isError: true }
      const text = result.content.map((c) => c.text).join("\n")
      const failed = result.isError === true
      const item: OutputItem = {
        id: itemId("mcp"),
        type: "mcp_call",
        server_label: target.label,
        name: call.function.name,
        arguments: call.function.arguments,
        output: failed ? null : text,
        error: failed ? text : null,
        status: failed ? "failed" : "completed"
      }
      return { item, text }
    })

    /** The chain ending at `id`, oldest first; another user's or platform's id is not found. */
    const loadChain = Effect.fnUntraced(function*(caller: Caller, id: string) {
      const endUserId = caller._tag === "EndUserKey" ? caller.endUserId : null
      const rows = yield* sql<StoredResponse & { depth: number }>`WITH RECURSIVE chain AS (
          SELECT r.*, 0 AS depth FROM responses r
            WHERE r.id = ${id} AND r.platform_id = ${caller.platformId} AND r.end_user_id IS NOT DISTINCT FROM ${endUserId}
          UNION ALL
          SELECT r.*, c.depth + 1 FROM responses r JOIN chain c ON r.id = c.previous_response_id
            WHERE r.platform_id = ${caller.platformId} AND r.end_user_id IS NOT DISTINCT FROM ${endUserId} AND c.depth < 1000)
        SELECT id, thread_id, input_items, output_items, depth FROM chain ORDER BY depth DESC`.pipe(Effect.orDie)
      if (rows.length === 0) {
        return yield* new NotFound({ code: "not_found", param: "previous_response_id", message: `No response '${id}'` })
      }
      return rows
    })

    // jsonb values are bound as JSON text: the driver would turn a JS array into a Postgres array.
    const store = (
      caller: Caller,
      id: string,
      body: ResponsesRequest,
      input: ReadonlyArray<InputItem>,
      output: ReadonlyArray<OutputItem>,
      usage: Usage | null,
      status: "completed" | "incomplete",
      threadId: string | null,
      createdAt: Date
    ) =>
      sql`INSERT INTO responses (id, platform_id, end_user_id, previous_response_id, thread_id, model, instructions,
          input_items, output_items, usage, status, request, created_at)
        VALUES (${id}, ${caller.platformId}, ${caller._tag === "EndUserKey" ? caller.endUserId : null},
          ${body.previous_response_id ?? null}, ${threadId}, ${body.model}, ${body.instructions ?? null},
          ${JSON.stringify(input)}::jsonb, ${JSON.stringify(output)}::jsonb,
          ${usage === null ? null : JSON.stringify(toUsage(usage))}::jsonb, ${status},
          ${sql.json({ tools: body.tools ?? [], tool_choice: body.tool_choice ?? "auto" })}, ${createdAt})
        ON CONFLICT (id) DO NOTHING`.pipe(Effect.orDie, Effect.asVoid)

    /**
     * Stores a response whose calls are already settled (billed). What the client sent was
     * checked before anything was billed (the body check refuses NUL and unpaired surrogates);
     * the output is the upstream's text, made storable by the caller. Should storing still fail,
     * the failure is logged, not answered: a 500 would say nothing was applied while the call was
     * billed, and an SDK retrying it would be billed again. The client gets the answer it paid
     * for; only later reads of this id (and chains through it) miss it.
     */
    const storeSettled = (...args: Parameters<typeof store>) =>
      store(...args).pipe(
        Effect.catchAllCause((cause) =>
          Effect.logError("response not stored after its call was billed; answered anyway", cause).pipe(
            Effect.annotateLogs({ response_id: args[1] })
          )
        )
      )

    const responseObject = (
      id: string,
      body: ResponsesRequest,
      createdAt: Date,
      status: ResponseObject["status"],
      output: ReadonlyArray<OutputItem>,
      usage: Usage | null,
      threadId: string | null
    ): ResponseObject => ({
      id,
      object: "response",
      created_at: Math.floor(createdAt.getTime() / 1000),
      status,
      model: body.model,
      output,
      usage: toUsage(usage),
      previous_response_id: body.previous_response_id ?? null,
      thread_id: threadId,
      instructions: body.instructions ?? null,
      error: null,
      incomplete_details: status === "incomplete" ? { reason: "max_tool_iterations" } : null,
      tools: body.tools ?? [],
      parallel_tool_calls: true,
      tool_choice: body.tool_choice ?? "auto",
      temperature: body.temperature ?? null,
      top_p: body.top_p ?? null,
      max_output_tokens: body.max_output_tokens ?? null,
      metadata: {}
    })

    /** Validation, context loading and admission (the five checks) shared by both modes. */
    const prepare = Effect.fnUntraced(function*(caller: Caller, body: ResponsesRequest) {
      const hosted = yield* resolveHosted(caller, body.tools ?? [])
      const input: ReadonlyArray<InputItem> = typeof body.input === "string" ? [{ role: "user", content: body.input }] : body.input
      const chain = body.previous_response_id == null ? [] : yield* loadChain(caller, body.previous_response_id)
      const history = chain.flatMap((r) => [...r.input_items, ...r.output_items])
      const messages: Array<ChatMessage> = [
        ...(body.instructions ? [{ role: "system" as const, content: body.instructions }] : []),
        ...toMessages([...history, ...input])
      ]
      if (messages.length === 0) {
        return yield* new ValidationError({ code: "validation_error", param: "input", message: "input is empty" })
      }
      const toolChoice = body.tool_choice === undefined
        ? undefined
        : typeof body.tool_choice === "string" ? body.tool_choice
        : "name" in body.tool_choice ? { type: "function" as const, function: { name: body.tool_choice.name } }
        : body.tool_choice
      const responseFormat = body.response_format ?? body.text?.format
      const chat: ChatRequest = {
        model: body.model,
        messages: messages as [ChatMessage, ...Array<ChatMessage>],
        stream: body.stream === true,
        // Usage is needed to store the response, whatever the client asked.
        ...(body.stream === true ? { stream_options: { include_usage: true } } : {}),
        ...(body.temperature !== undefined ? { temperature: body.temperature } : {}),
        ...(body.top_p !== undefined ? { top_p: body.top_p } : {}),
        ...(body.max_output_tokens !== undefined ? { max_tokens: body.max_output_tokens } : {}),
        ...(responseFormat !== undefined ? { response_format: responseFormat } : {}),
        ...(toolChoice !== undefined ? { tool_choice: toolChoice } : {}),
        ...((body.tools ?? []).length > 0
          ? {
            tools: [
              ...(body.tools ?? []).flatMap((t) =>
                t.type === "function"
                  ? [{
                    type: "function" as const,
                    function: {
                      name: t.name,
                      ...(t.description != null ? { description: t.description } : {}),
                      ...(t.parameters != null ? { parameters: t.parameters } : {})
                    }
                  }]
                  : []
              ),
              ...hosted.chatTools
            ]
          }
          : {})
      }
      const admitted = yield* inference.admit(caller, chat, "response").pipe(
        Effect.catchTag("ValidationError", (e) =>
          Effect.fail(e.code === "max_tokens_too_small" ? new ValidationError({ ...e, param: "max_output_tokens", message: "max_output_tokens must be at least 16 for this model" }) : e))
      )
      const threadId = body.thread_id ?? chain.at(-1)?.thread_id ?? null
      const createdAt = new Date(yield* Clock.currentTimeMillis)
      return { admitted, input, threadId, createdAt, hosted }
    })

    /**
     * The hybrid loop: call the model; when it asks only for tool-app tools, run them inline and
     * call it again (at most MAX_ITERATIONS turns, each settled and logged as `response`); any
     * function tool ends the loop at once so the client can run it. Without hosted tools this
     * is a single call.
     */
    const runLoop = Effect.fnUntraced(function*(prepared: Effect.Effect.Success<ReturnType<typeof prepare>>) {
      const { admitted, hosted } = prepared
      const output: Array<OutputItem> = []
      let messages = [...admitted.request.messages]
      let usage: Usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 }
      for (let turn = 0; turn < MAX_ITERATIONS; turn++) {
        // Later turns reuse the admission; the rate limiter counted the request once.
        const step = turn === 0
          ? admitted
          : { ...admitted, request: { ...admitted.request, messages: messages as [ChatMessage, ...Array<ChatMessage>] }, limits: NO_LIMITS }
        const completion: ChatCompletion = yield* inference.complete(step)
        usage = {
          prompt_tokens: usage.prompt_tokens + completion.usage.prompt_tokens,
          completion_tokens: usage.completion_tokens + completion.usage.completion_tokens,
          total_tokens: usage.total_tokens + completion.usage.total_tokens
        }
        const message = completion.choices[0]?.message
        const calls = message?.tool_calls ?? []
        const hostedCalls = calls.filter((c) => hosted.byName.has(c.function.name))
        if (calls.length === 0 || hostedCalls.length < calls.length) {
          // A final answer, or a function tool for the client: its hosted calls are not run.
          output.push(...toOutput(message?.content ?? null, calls.filter((c) => !hosted.byName.has(c.function.name)), "completed"))
          return { output, usage, status: "completed" as const }
        }
        messages = [...messages, { role: "assistant", content: message?.content ?? null, tool_calls: calls }]
        for (const call of hostedCalls) {
          const target = hosted.byName.get(call.function.name)!
          const result = yield* runHostedCall(target, call)
          output.push(result.item)
          messages = [...messages, { role: "tool", tool_call_id: call.id, content: result.text }]
        }
      }
      return { output, usage, status: "incomplete" as const }
    })

    /** Non-streaming: the loop's output, stored and returned. */
    const create = Effect.fnUntraced(function*(caller: Caller, body: ResponsesRequest) {
      const prepared = yield* prepare(caller, body)
      const { admitted, input, threadId, createdAt } = prepared
      const result = yield* runLoop(prepared)
      // The upstream's text as stored and as answered: NUL and unpaired surrogates become U+FFFD.
      const output = toStorable(result.output)
      yield* storeSettled(caller, admitted.requestId, body, input, output, result.usage, result.status, threadId, createdAt)
      return {
        admitted,
        response: responseObject(admitted.requestId, body, createdAt, result.status, output, result.usage, threadId)
      }
    })

    /**
     * Streaming: the spec's events in order. Text opens a message item (output_item.added,
     * content_part.added, output_text.delta...), tool calls open function_call items; the end
     * closes them and sends response.completed with usage. An interrupted stream stops without
     * response.completed and is stored as incomplete.
     */
    const stream = Effect.fnUntraced(function*(caller: Caller, body: ResponsesRequest) {
      const prepared = yield* prepare(caller, body)
      if (prepared.hosted.servers.length > 0) return yield* streamHosted(caller, body, prepared)
      const { admitted, input, threadId, createdAt } = prepared
      const { chunks, dropped } = yield* inference.stream(admitted)
      const id = admitted.requestId
      let sequence = 0
      const event = (type: string, fields: Record<string, unknown>): ResponseEvent => ({ type, sequence_number: sequence++, ...fields })
      const state = {
        output: [] as Array<OutputItem>,
        message: null as null | { id: string; index: number; text: string },
        calls: new Map<number, { id: string; index: number; callId: string; name: string; args: string }>(),
        usage: null as Usage | null,
        stored: false
      }
      const closeMessage = (): Array<ResponseEvent> => {
        const m = state.message
        if (m === null) return []
        state.message = null
        const part = { type: "output_text", text: m.text, annotations: [] }
        const item: OutputItem = { id: m.id, type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: m.text, annotations: [] }] }
        state.output[m.index] = item
        return [
          event("response.output_text.done", { item_id: m.id, output_index: m.index, content_index: 0, text: m.text, logprobs: [] }),
          event("response.content_part.done", { item_id: m.id, output_index: m.index, content_index: 0, part }),
          event("response.output_item.done", { output_index: m.index, item })
        ]
      }
      const closeCalls = (): Array<ResponseEvent> =>
        [...state.calls.values()].flatMap((c) => {
          const item: OutputItem = { id: c.id, type: "function_call", call_id: c.callId, name: c.name, arguments: c.args, status: "completed" }
          state.output[c.index] = item
          return [
            event("response.function_call_arguments.done", { item_id: c.id, output_index: c.index, arguments: c.args }),
            event("response.output_item.done", { output_index: c.index, item })
          ]
        })
      const onChunk = (chunk: ChatChunk): Array<ResponseEvent> => {
        if (chunk.usage) state.usage = chunk.usage
        const events: Array<ResponseEvent> = []
        for (const choice of chunk.choices) {
          const text = choice.delta.content ?? ""
          if (text !== "") {
            if (state.message === null) {
              const index = state.output.length
              state.message = { id: itemId("msg"), index, text: "" }
              state.output.push({ id: state.message.id, type: "message", role: "assistant", status: "incomplete", content: [] })
              events.push(
                event("response.output_item.added", {
                  output_index: index,
                  item: { id: state.message.id, type: "message", role: "assistant", status: "in_progress", content: [] }
                }),
                event("response.content_part.added", {
                  item_id: state.message.id,
                  output_index: index,
                  content_index: 0,
                  part: { type: "output_text", text: "", annotations: [] }
                })
              )
            }
            state.message.text += text
            events.push(event("response.output_text.delta", {
              item_id: state.message.id,
              output_index: state.message.index,
              content_index: 0,
              delta: text,
              logprobs: []
            }))
          }
          for (const delta of choice.delta.tool_calls ?? []) {
            let call = state.calls.get(delta.index)
            if (call === undefined) {
              events.push(...closeMessage())
              const index = state.output.length
              call = { id: itemId("fc"), index, callId: delta.id ?? itemId("call"), name: delta.function?.name ?? "", args: "" }
              state.calls.set(delta.index, call)
              state.output.push({ id: call.id, type: "function_call", call_id: call.callId, name: call.name, arguments: "", status: "incomplete" })
              events.push(event("response.output_item.added", {
                output_index: index,
                item: { id: call.id, type: "function_call", call_id: call.callId, name: call.name, arguments: "", status: "in_progress" }
              }))
            }
            const piece = delta.function?.arguments ?? ""
            if (piece !== "") {
              call.args += piece
              events.push(event("response.function_call_arguments.delta", { item_id: call.id, output_index: call.index, delta: piece }))
            }
          }
        }
        return events
      }
      const persist = (status: "completed" | "incomplete") =>
        Effect.suspend(() => {
          if (state.stored) return Effect.void
          state.stored = true
          const output = toStorable(state.output.filter((o) => o !== undefined))
          return storeSettled(caller, id, body, input, output, state.usage, status, threadId, createdAt)
        })
      const created = responseObject(id, body, createdAt, "in_progress", [], null, threadId)
      const events = Stream.make(
        event("response.created", { response: created }),
        event("response.in_progress", { response: created })
      ).pipe(
        Stream.concat(chunks.pipe(Stream.mapConcat(onChunk))),
        Stream.concat(Stream.suspend(() => {
          if (dropped()) return Stream.empty
          const closing = [...closeMessage(), ...closeCalls()]
          const done = responseObject(id, body, createdAt, "completed", state.output, state.usage, threadId)
          return Stream.fromIterable([...closing, event("response.completed", { response: done })]).pipe(
            Stream.tap((e) => e.type === "response.completed" ? persist("completed") : Effect.void)
          )
        })),
        Stream.ensuring(persist("incomplete"))
      )
      return { admitted, events }
    })

    /**
     * With hosted tools the loop runs to its end first; the events are then emitted in the
     * spec's order: tool discovery, each mcp_call (arguments, progress, completion), then the
     * answer's items and response.completed.
     */
    const streamHosted = Effect.fnUntraced(function*(caller: Caller, body: ResponsesRequest, prepared: Effect.Effect.Success<ReturnType<typeof prepare>>) {
      const { admitted, input, threadId, createdAt, hosted } = prepared
      const id = admitted.requestId
      let sequence = 0
      const event = (type: string, fields: Record<string, unknown>): ResponseEvent => ({ type, sequence_number: sequence++, ...fields })
      const created = responseObject(id, body, createdAt, "in_progress", [], null, threadId)
      const run = yield* runLoop(prepared)
      const result = { ...run, output: toStorable(run.output) }
      yield* storeSettled(caller, id, body, input, result.output, result.usage, result.status, threadId, createdAt)
      const discovery = hosted.servers.flatMap((server) => [
        event("response.mcp_list_tools.in_progress", { server_label: server.label }),
        event("response.mcp_list_tools.completed", { server_label: server.label, tools: server.tools.map((t) => ({ name: t.name, description: t.description, input_schema: t.inputSchema })) })
      ])
      const items = result.output.flatMap((item, index): Array<ResponseEvent> => {
        if (item.type === "mcp_call") {
          return [
            event("response.output_item.added", { output_index: index, item: { ...item, status: "in_progress", output: null, error: null } }),
            event("response.mcp_call_arguments.delta", { item_id: item.id, output_index: index, delta: item.arguments }),
            event("response.mcp_call_arguments.done", { item_id: item.id, output_index: index, arguments: item.arguments }),
            event("response.mcp_call.in_progress", { item_id: item.id, output_index: index }),
            event(item.status === "failed" ? "response.mcp_call.failed" : "response.mcp_call.completed", { item_id: item.id, output_index: index }),
            event("response.output_item.done", { output_index: index, item })
          ]
        }
        if (item.type === "function_call") {
          return [
            event("response.output_item.added", { output_index: index, item: { ...item, arguments: "", status: "in_progress" } }),
            event("response.function_call_arguments.delta", { item_id: item.id, output_index: index, delta: item.arguments }),
            event("response.function_call_arguments.done", { item_id: item.id, output_index: index, arguments: item.arguments }),
            event("response.output_item.done", { output_index: index, item })
          ]
        }
        const text = item.content.map((c) => c.text).join("")
        const part = { type: "output_text", text, annotations: [] }
        return [
          event("response.output_item.added", { output_index: index, item: { ...item, status: "in_progress", content: [] } }),
          event("response.content_part.added", { item_id: item.id, output_index: index, content_index: 0, part: { ...part, text: "" } }),
          event("response.output_text.delta", { item_id: item.id, output_index: index, content_index: 0, delta: text, logprobs: [] }),
          event("response.output_text.done", { item_id: item.id, output_index: index, content_index: 0, text, logprobs: [] }),
          event("response.content_part.done", { item_id: item.id, output_index: index, content_index: 0, part }),
          event("response.output_item.done", { output_index: index, item })
        ]
      })
      const done = responseObject(id, body, createdAt, result.status, result.output, result.usage, threadId)
      const events: Stream.Stream<ResponseEvent> = Stream.fromIterable([
        event("response.created", { response: created }),
        event("response.in_progress", { response: created }),
        ...discovery,
        ...items,
        event(result.status === "completed" ? "response.completed" : "response.incomplete", { response: done })
      ])
      return { admitted, events }
    })

    return { create, stream } as const
  })
}) {}
