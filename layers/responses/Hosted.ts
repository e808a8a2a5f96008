// The hybrid MCP tool loop: the request's `type: mcp` items resolved to tool-app tools offered to
// the model (and, on an agent model, the caller's per-user tools), and the loop that runs the
// model's calls of them inline, turn after turn.
import { Effect, Either } from "effect"
import type { ChatCompletion, ChatMessage, FunctionTool, ToolCall, Usage } from "../../schemas/Chat.js"
import { Forbidden, type PaymentRequired, ValidationError } from "../../schemas/Errors.js"
import type { OutputItem, ResponsesRequest } from "../../schemas/Responses.js"
import type { EndUserPrincipal, KeyAuth } from "../access/KeyAuth.js"
import type { Admitted, Caller, Inference } from "../pipeline/Inference.js"
import type { RateLimitExceeded } from "../pipeline/RateLimiter.js"
import { PERSONAL, PERSONAL_LABEL, type ToolHost, type ToolListing } from "../tools/ToolHost.js"
import type { ToolResult } from "../tools/apps/ToolApp.js"
import { itemId, toOutput } from "./Items.js"

/** The hybrid loop's cap: model turns per request (spec "Limits"). */
const MAX_ITERATIONS = 10

/**
 * Why a response ended incomplete: the loop's cap, or a later turn's refusal by checks 2 to 5
 * (the refusal's code). OpenAI's reasons are max_output_tokens and content_filter; these extend them.
 */
export type IncompleteReason = "max_tool_iterations" | "rate_limit_exceeded" | PaymentRequired["code"]

const refusalReason = (refusal: RateLimitExceeded | PaymentRequired): IncompleteReason =>
  refusal._tag === "RateLimitExceeded" ? "rate_limit_exceeded" : refusal.code

/** What the loop gives: the output items, the turns' usage summed, and how it ended. */
export interface LoopResult {
  readonly output: Array<OutputItem>
  readonly usage: Usage
  readonly status: "completed" | "incomplete"
  readonly incompleteReason: IncompleteReason | null
}

/** A hosted tool offered to the model: which app serves it, as which end user. */
export interface HostedTarget {
  /** The app slug, or PERSONAL for the per-user URL. */
  readonly slug: string
  /** The item's `server_label`, as the mcp_call items name it. */
  readonly label: string
  readonly principal: EndUserPrincipal
}

/** The hosted tools a request offers: by tool name, as chat tools, and per server for discovery. */
export interface HostedTools {
  readonly byName: Map<string, HostedTarget>
  readonly chatTools: Array<FunctionTool>
  readonly servers: Array<{ readonly label: string; readonly tools: ReadonlyArray<ToolListing> }>
}

export const makeHostedTools = (deps: {
  readonly inference: Inference
  readonly toolHost: ToolHost
  readonly keyAuth: KeyAuth
  readonly toolServiceUrl: Effect.Effect<string>
}) => {
  const { inference, toolHost, keyAuth, toolServiceUrl } = deps

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

  /**
   * An agent model's tools: what the caller's per-user tool URL offers (skills, capability
   * tools), added as if the request carried its `gateway` item. A platform key has no end user,
   * so no per-user tools; a key that may not use the tool service is offered none. The request keeps what
   * it names itself: its own `gateway` item (with its allowed_tools) stands, and a function tool
   * of the same name wins over a per-user tool.
   */
  const withAgentTools = Effect.fnUntraced(function*(caller: Caller, hosted: HostedTools, functionNames: ReadonlySet<string>) {
    if (caller._tag !== "EndUserKey" || hosted.servers.some((s) => s.label === PERSONAL_LABEL)) return hosted
    const listing = yield* toolHost.listTools(caller, PERSONAL).pipe(
      Effect.catchTags({ Forbidden: () => Effect.succeed([]), NotFound: () => Effect.succeed([]) })
    )
    const offered = listing.filter((t) => !hosted.byName.has(t.name) && !functionNames.has(t.name))
    if (offered.length === 0) return hosted
    const byName = new Map(hosted.byName)
    const target: HostedTarget = { slug: PERSONAL, label: PERSONAL_LABEL, principal: caller }
    for (const t of offered) byName.set(t.name, target)
    const result: HostedTools = {
      byName,
      chatTools: [
        ...hosted.chatTools,
        ...offered.map((t): FunctionTool => ({ type: "function", function: { name: t.name, description: t.description, parameters: { ...t.inputSchema } } }))
      ],
      servers: [...hosted.servers, { label: PERSONAL_LABEL, tools: offered }]
    }
    return result
  })

  /** Runs one hosted call (metered by ToolHost); app errors and refused paid calls become a failed mcp_call item. */
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

  /**
   * The hybrid loop: call the model; when it asks only for tool-app tools, run them inline and
   * call it again (at most MAX_ITERATIONS turns, each settled and logged as `response`, or
   * `agent` on an agent model); any
   * function tool ends the loop at once so the client can run it. Without hosted tools this
   * is a single call. Every turn after the first passes checks 2 to 5 again (Inference.admitTurn):
   * a refused turn ends the response as incomplete with the refusal's code as the reason, the
   * output so far kept and the turns before it billed.
   */
  const runLoop = Effect.fnUntraced(function*(prepared: { readonly admitted: Admitted; readonly hosted: HostedTools }) {
    const { hosted } = prepared
    const output: Array<OutputItem> = []
    let admitted = prepared.admitted
    let messages = [...admitted.request.messages]
    let usage: Usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 }
    const incomplete = (reason: IncompleteReason): LoopResult => ({ output, usage, status: "incomplete", incompleteReason: reason })
    for (let turn = 0; turn < MAX_ITERATIONS; turn++) {
      if (turn > 0) {
        const request = { ...admitted.request, messages: messages as [ChatMessage, ...Array<ChatMessage>] }
        const next = yield* Effect.either(inference.admitTurn(admitted, request))
        if (Either.isLeft(next)) return incomplete(refusalReason(next.left))
        admitted = next.right
      }
      const completion: ChatCompletion = yield* inference.complete(admitted)
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
        const done: LoopResult = { output, usage, status: "completed", incompleteReason: null }
        return done
      }
      messages = [...messages, { role: "assistant", content: message?.content ?? null, tool_calls: calls }]
      for (const call of hostedCalls) {
        const target = hosted.byName.get(call.function.name)!
        const result = yield* runHostedCall(target, call)
        output.push(result.item)
        messages = [...messages, { role: "tool", tool_call_id: call.id, content: result.text }]
      }
    }
    return incomplete("max_tool_iterations")
  })

  return { resolveHosted, withAgentTools, runLoop } as const
}
