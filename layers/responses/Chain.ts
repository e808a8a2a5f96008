// The stored-response chain: each response is stored per end user, and previous_response_id
// loads the chain it ends as context for the next call.
import type { PgClient } from "@effect/sql-pg"
import { Effect } from "effect"
import type { Usage } from "../../schemas/Chat.js"
import { NotFound } from "../../schemas/Errors.js"
import type { InputItem, OutputItem, ResponsesRequest } from "../../schemas/Responses.js"
import type { Caller } from "../pipeline/Inference.js"
import { toUsage, withoutCredentials } from "./Items.js"

export interface StoredResponse {
  readonly id: string
  readonly thread_id: string | null
  readonly input_items: ReadonlyArray<InputItem>
  readonly output_items: ReadonlyArray<OutputItem>
}

/**
 * Who owns a stored response: an end-user key's calls belong to its end user, a platform key's
 * to the platform with no end user (so a platform key does not read its end users' responses).
 * Every read, chain and delete matches `platform_id` and this, `end_user_id IS NOT DISTINCT FROM`.
 */
export const ownerEndUser = (caller: Caller): string | null => caller._tag === "EndUserKey" ? caller.endUserId : null

/**
 * The request parameters a stored response keeps (its input items have their own column) to
 * rebuild the response object when it is read back.
 */
const storedParameters = (body: ResponsesRequest) => {
  const { input: _input, stream: _stream, ...parameters } = body
  return { ...parameters, tools: withoutCredentials(body.tools), tool_choice: body.tool_choice ?? "auto" }
}

export const makeResponseStore = (sql: PgClient.PgClient) => {
  /** The chain ending at `id`, oldest first; another user's or platform's id is not found. */
  const loadChain = Effect.fnUntraced(function*(caller: Caller, id: string) {
    const endUserId = ownerEndUser(caller)
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
    createdAt: Date,
    incompleteReason: string | null = null
  ) =>
    sql`INSERT INTO responses (id, platform_id, end_user_id, previous_response_id, thread_id, model, instructions,
        input_items, output_items, usage, status, request, created_at, incomplete_reason)
      VALUES (${id}, ${caller.platformId}, ${ownerEndUser(caller)},
        ${body.previous_response_id ?? null}, ${threadId}, ${body.model}, ${body.instructions ?? null},
        ${JSON.stringify(input)}::jsonb, ${JSON.stringify(output)}::jsonb,
        ${usage === null ? null : JSON.stringify(toUsage(usage))}::jsonb, ${status},
        ${sql.json(storedParameters(body))}, ${createdAt}, ${status === "incomplete" ? incompleteReason : null})
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

  return { loadChain, storeSettled } as const
}
