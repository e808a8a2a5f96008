// The caller's stored responses read back and deleted: GET /v1/responses/{id}, its input items
// (OpenAI's cursor list) and DELETE. Ownership is the chain's (Chain.ownerEndUser): another end
// user's, another platform's, a deleted or an unknown id are all the same 404.
import type { PgClient } from "@effect/sql-pg"
import { Effect } from "effect"
import { NotFound, ValidationError } from "../../schemas/Errors.js"
import type { InputItemsQuery, ListedInputItem, OutputItem, ResponseObject, ResponsesRequest } from "../../schemas/Responses.js"
import type { Caller } from "../pipeline/Inference.js"
import { ownerEndUser } from "./Chain.js"
import { responseObject } from "./Items.js"

interface StoredRow {
  readonly id: string
  readonly previous_response_id: string | null
  readonly thread_id: string | null
  readonly model: string
  readonly instructions: string | null
  readonly output_items: ReadonlyArray<OutputItem>
  readonly usage: { readonly input_tokens: number; readonly output_tokens: number; readonly total_tokens: number } | null
  readonly status: "completed" | "incomplete"
  readonly request: Record<string, unknown>
  readonly incomplete_reason: string | null
  readonly created_at: Date
}

type StoredItem = Readonly<Record<string, unknown>>

/** The id is not echoed: the same answer whether it exists elsewhere or nowhere. */
const notFound = new NotFound({ code: "not_found", message: "No such response" })

const idPrefix = (type: string) =>
  type === "message" ? "msg" : type === "function_call" ? "fc" : type === "function_call_output" ? "fco" : "item"

/**
 * The input items as OpenAI lists them, in input order. Ids must be unique within the list (the
 * SDK's pagination resumes `after` the last one): an item keeps its own id unless an earlier item
 * took it; the others get `<prefix>_<response hex>_<position>`, the same on every read.
 */
export const listedItems = (responseId: string, items: ReadonlyArray<StoredItem>): Array<ListedInputItem> => {
  const hex = responseId.replace(/^resp_/, "")
  const seen = new Set<string>()
  return items.map((item, index) => {
    const type = typeof item["type"] === "string" ? item["type"] : "message"
    const own = item["id"]
    const id = typeof own === "string" && !seen.has(own) ? own : `${idPrefix(type)}_${hex}_${index}`
    seen.add(id)
    const content = item["content"]
    const parts = type === "message" && typeof content === "string"
      ? { content: [item["role"] === "assistant" ? { type: "output_text", text: content, annotations: [] } : { type: "input_text", text: content }] }
      : {}
    return { ...item, ...parts, id, type }
  })
}

export const makeStoredResponses = (sql: PgClient.PgClient) => {
  /** The response as POST /v1/responses answered it, rebuilt from the stored row. */
  const retrieve = Effect.fnUntraced(function*(caller: Caller, id: string) {
    const [row] = yield* sql<StoredRow>`SELECT id, previous_response_id, thread_id, model, instructions, output_items, usage,
        status, request, incomplete_reason, created_at
      FROM responses WHERE id = ${id} AND platform_id = ${caller.platformId}
        AND end_user_id IS NOT DISTINCT FROM ${ownerEndUser(caller)}`.pipe(Effect.orDie)
    if (row === undefined) return yield* notFound
    // The stored request parameters (rows stored before they were kept hold only tools and
    // tool_choice), with the columns that are the request's own fields.
    const body = {
      ...row.request,
      model: row.model,
      instructions: row.instructions,
      previous_response_id: row.previous_response_id,
      input: []
    } as unknown as ResponsesRequest
    const usage = row.usage === null
      ? null
      : { prompt_tokens: row.usage.input_tokens, completion_tokens: row.usage.output_tokens, total_tokens: row.usage.total_tokens }
    const response: ResponseObject = responseObject(
      row.id, body, row.created_at, row.status, row.output_items, usage, row.thread_id, row.incomplete_reason
    )
    return response
  })

  /** One page of the response's input items, OpenAI's cursor list (`after` an item id). */
  const inputItems = Effect.fnUntraced(function*(caller: Caller, id: string, query: InputItemsQuery) {
    const [row] = yield* sql<{ input_items: ReadonlyArray<StoredItem> }>`SELECT input_items FROM responses
      WHERE id = ${id} AND platform_id = ${caller.platformId}
        AND end_user_id IS NOT DISTINCT FROM ${ownerEndUser(caller)}`.pipe(Effect.orDie)
    if (row === undefined) return yield* notFound
    const items = listedItems(id, row.input_items)
    const ordered = query.order === "asc" ? items : items.reverse()
    let start = 0
    if (query.after !== undefined) {
      const at = ordered.findIndex((item) => item.id === query.after)
      if (at < 0) {
        return yield* new ValidationError({ code: "validation_error", param: "after", message: `No input item '${query.after}' in this response` })
      }
      start = at + 1
    }
    const data = ordered.slice(start, start + query.limit)
    return {
      object: "list" as const,
      data,
      first_id: data[0]?.id ?? null,
      last_id: data.at(-1)?.id ?? null,
      has_more: start + query.limit < ordered.length
    }
  })

  /**
   * Deletes the stored response (the row itself: its input and output are gone, and a chain
   * through it ends there). Its calls' log rows and debits are the money history and stay.
   */
  const remove = Effect.fnUntraced(function*(caller: Caller, id: string) {
    const deleted = yield* sql<{ id: string }>`DELETE FROM responses
      WHERE id = ${id} AND platform_id = ${caller.platformId}
        AND end_user_id IS NOT DISTINCT FROM ${ownerEndUser(caller)}
      RETURNING id`.pipe(Effect.orDie)
    if (deleted.length === 0) return yield* notFound
    return { id, object: "response" as const, deleted: true as const }
  })

  return { retrieve, inputItems, remove } as const
}
