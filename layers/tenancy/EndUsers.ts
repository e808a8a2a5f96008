// End users of a platform. Creation is retry-safe per external_id (one user, a fresh key per
// call); deletion is permanent and cascades to keys, budgets, limits and connections.
import { PgClient } from "@effect/sql-pg"
import { Data, Effect, Option } from "effect"
import type { Budget } from "../../schemas/Budgets.js"
import type { ApiKeyCreated } from "../../schemas/ApiKeys.js"
import type { EndUser } from "../../schemas/EndUsers.js"
import { NotFound } from "../../schemas/Errors.js"
import { isUuid } from "../lib/Ids.js"
import { dec } from "../lib/Money.js"
import { offsetOf, paginate } from "../lib/Pagination.js"
import { ApiKeys } from "./ApiKeys.js"
import { type Actor, BudgetLedger, toBudget } from "../ledger/BudgetLedger.js"
import { KeyAuth } from "../access/KeyAuth.js"

interface EndUserRow {
  readonly id: string
  readonly platform_id: string
  readonly external_id: string
  readonly display_name: string
  readonly metadata: Record<string, unknown>
  readonly is_active: boolean
  readonly created_at: Date
  readonly updated_at: Date
}

const toEndUser = (row: EndUserRow): EndUser => row

export interface CreateResult {
  /** True for the first call with this external_id (201), false for a repeat (200). */
  readonly created: boolean
  readonly user: EndUser
  readonly apiKey: ApiKeyCreated
  readonly budget: Budget | null
}

class RetryCreate extends Data.TaggedError("RetryCreate") {}

const endUserNotFound = new NotFound({ code: "not_found", message: "No such end user" })

export class EndUsers extends Effect.Service<EndUsers>()("gateway/EndUsers", {
  dependencies: [ApiKeys.Default, BudgetLedger.Default, KeyAuth.Default],
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const apiKeys = yield* ApiKeys
    const ledger = yield* BudgetLedger
    const keyAuth = yield* KeyAuth

    const create = (
      platformId: string,
      input: { readonly external_id: string; readonly display_name?: string | undefined; readonly metadata?: Record<string, unknown> | undefined },
      actor: Actor
    ) =>
      Effect.gen(function*() {
        // ON CONFLICT DO NOTHING: concurrent first calls wait on the unique index, then see the winner.
        const inserted = yield* sql<EndUserRow>`INSERT INTO end_users (platform_id, external_id, display_name, metadata)
          VALUES (${platformId}, ${input.external_id}, ${input.display_name ?? input.external_id.slice(0, 100)},
            ${sql.json(input.metadata ?? {})})
          ON CONFLICT (platform_id, external_id) DO NOTHING RETURNING *`
        const created = inserted.length === 1
        const existing = created ? inserted : yield* sql<EndUserRow>`SELECT * FROM end_users
          WHERE platform_id = ${platformId} AND external_id = ${input.external_id}`
        // Deleted between our insert and select by a concurrent DELETE: the caller retries.
        if (existing[0] === undefined) return yield* Effect.fail(new RetryCreate())
        const user = existing[0]
        let budget: Budget | null = null
        if (created) {
          const [platform] = yield* sql<{ default_budget_usd: string | null }>`
            SELECT settings->>'default_budget_usd' AS default_budget_usd FROM platforms WHERE id = ${platformId}`
          if (platform?.default_budget_usd != null) {
            const row = yield* ledger.open({
              platformId,
              endUserId: user.id,
              maxUsd: dec(platform.default_budget_usd),
              period: "monthly",
              reason: "default_budget_usd",
              metadata: { source: "platform.settings.default_budget_usd" }
            }, actor)
            budget = toBudget(row)
          }
        } else {
          budget = Option.getOrNull(Option.map(yield* ledger.findLive(user.id), toBudget))
        }
        const apiKey = yield* apiKeys.insert({ platformId, endUserId: user.id })
        return { created, user: toEndUser(user), apiKey, budget } satisfies CreateResult
      }).pipe(
        sql.withTransaction,
        Effect.retry({ while: (e) => e instanceof RetryCreate, times: 3 }),
        Effect.orDie
      )

    const list = (platformId: string, params: { readonly external_id?: string | undefined; readonly page: number; readonly limit: number }) => {
      const filter = params.external_id === undefined ? sql`` : sql`AND external_id = ${params.external_id}`
      return paginate(
        params,
        sql<{ total: number }>`SELECT count(*)::int AS total FROM end_users WHERE platform_id = ${platformId} ${filter}`,
        sql<EndUserRow>`SELECT * FROM end_users WHERE platform_id = ${platformId} ${filter}
          ORDER BY created_at, id LIMIT ${params.limit} OFFSET ${offsetOf(params.page, params.limit)}`.pipe(
          Effect.map((rows) => rows.map(toEndUser))
        )
      ).pipe(Effect.orDie)
    }

    const get = (platformId: string, endUserId: string) =>
      Effect.gen(function*() {
        if (!isUuid(endUserId)) return yield* endUserNotFound
        const [row] = yield* sql<EndUserRow>`SELECT * FROM end_users
          WHERE id = ${endUserId} AND platform_id = ${platformId}`.pipe(Effect.orDie)
        if (row === undefined) return yield* endUserNotFound
        return toEndUser(row)
      })

    /** metadata replaces the stored object; is_active false stops the user's keys at once. */
    const update = (
      platformId: string,
      endUserId: string,
      patch: { readonly display_name?: string | undefined; readonly metadata?: Record<string, unknown> | undefined; readonly is_active?: boolean | undefined }
    ) =>
      Effect.gen(function*() {
        const current = yield* get(platformId, endUserId)
        const [row] = yield* sql<EndUserRow>`UPDATE end_users SET
            display_name = ${patch.display_name ?? current.display_name},
            metadata = ${sql.json(patch.metadata ?? current.metadata)},
            is_active = ${patch.is_active ?? current.is_active},
            updated_at = now()
          WHERE id = ${endUserId} AND platform_id = ${platformId} RETURNING *`.pipe(Effect.orDie)
        if (row === undefined) return yield* endUserNotFound
        if (patch.is_active === false) yield* keyAuth.invalidate({ endUserId })
        return toEndUser(row)
      })

    const remove = (platformId: string, endUserId: string) =>
      Effect.gen(function*() {
        if (!isUuid(endUserId)) return yield* endUserNotFound
        const rows = yield* sql`DELETE FROM end_users WHERE id = ${endUserId} AND platform_id = ${platformId}
          RETURNING id`.pipe(Effect.orDie)
        if (rows.length === 0) return yield* endUserNotFound
        yield* keyAuth.invalidate({ endUserId })
      })

    return { create, list, get, update, remove } as const
  })
}) {}
