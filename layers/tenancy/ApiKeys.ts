// API keys of a platform: platform keys and end-user keys. The raw secret exists only in the
// creation response; revocation and deletion invalidate the auth cache on every instance.
import { PgClient } from "@effect/sql-pg"
import { Clock, Effect, Option } from "effect"
import type { ApiKey, ApiKeyCreated } from "../../schemas/ApiKeys.js"
import { NotFound, ValidationError } from "../../schemas/Errors.js"
import { isUuid } from "../lib/Ids.js"
import { offsetOf, paginate } from "../lib/Pagination.js"
import { KeyAuth } from "../access/KeyAuth.js"
import { mintKey } from "../access/KeyFormat.js"

interface KeyRow {
  readonly id: string
  readonly platform_id: string
  readonly end_user_id: string | null
  readonly key_prefix: string
  readonly name: string
  readonly scopes: ReadonlyArray<string>
  readonly is_active: boolean
  readonly last_used_at: Date | null
  readonly expires_at: Date | null
  readonly created_at: Date
}

const COLUMNS = "id, platform_id, end_user_id, key_prefix, name, scopes, is_active, last_used_at, expires_at, created_at"

/** Wire record: end_user_id only on end-user keys, last_used_at only on platform keys. */
export const toApiKey = (row: KeyRow): ApiKey => {
  const base = {
    id: row.id,
    platform_id: row.platform_id,
    key_prefix: row.key_prefix,
    name: row.name,
    scopes: row.scopes,
    is_active: row.is_active,
    expires_at: row.expires_at,
    created_at: row.created_at
  }
  return row.end_user_id === null
    ? { ...base, last_used_at: row.last_used_at }
    : { ...base, end_user_id: row.end_user_id }
}

export type KeyType = "platform" | "end_user"

export interface NewKey {
  readonly platformId: string
  readonly endUserId?: string | undefined
  readonly name?: string | undefined
  readonly scopes?: ReadonlyArray<string> | undefined
  readonly expiresAt?: Date | undefined
}

const keyNotFound = new NotFound({ code: "not_found", message: "No such API key" })

export class ApiKeys extends Effect.Service<ApiKeys>()("gateway/ApiKeys", {
  dependencies: [KeyAuth.Default],
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const keyAuth = yield* KeyAuth

    /** Inserts a key (inside the caller's transaction when there is one). */
    const insert = (input: NewKey) =>
      Effect.gen(function*() {
        const minted = mintKey(input.endUserId === undefined ? "plat" : "eu")
        const scopes = [...new Set(input.scopes ?? ["inference"])]
        const [row] = yield* sql<KeyRow>`INSERT INTO api_keys
            (platform_id, end_user_id, key_hash, key_prefix, name, scopes, expires_at)
          VALUES (${input.platformId}, ${input.endUserId ?? null}, ${minted.hash}, ${minted.prefix},
            ${input.name ?? "default"}, ${scopes}::text[], ${input.expiresAt ?? null})
          RETURNING ${sql.literal(COLUMNS)}`
        const created: ApiKeyCreated = { ...toApiKey(row!), raw_key: minted.raw }
        return created
      })

    /** POST /api-keys: a platform key, or an end-user key when end_user_id is given. */
    const create = (platformId: string, input: Omit<NewKey, "platformId">) =>
      Effect.gen(function*() {
        if (input.expiresAt !== undefined && input.expiresAt.getTime() <= (yield* Clock.currentTimeMillis)) {
          return yield* new ValidationError({ code: "validation_error", param: "expires_at", message: "expires_at must be in the future" })
        }
        if (input.endUserId !== undefined) {
          const owner = isUuid(input.endUserId)
            ? yield* sql`SELECT 1 FROM end_users WHERE id = ${input.endUserId} AND platform_id = ${platformId}`
            : []
          if (owner.length === 0) {
            return yield* new NotFound({ code: "not_found", param: "end_user_id", message: "No such end user" })
          }
        }
        return yield* insert({ ...input, platformId })
      }).pipe(Effect.catchTag("SqlError", Effect.die))

    const kindFilter = (type: KeyType) =>
      type === "platform" ? sql`end_user_id IS NULL` : sql`end_user_id IS NOT NULL`

    const list = (
      platformId: string,
      params: { readonly type: KeyType; readonly end_user_id?: string | undefined; readonly page: number; readonly limit: number }
    ) => {
      const where = sql.and([
        sql`platform_id = ${platformId}`,
        sql`deleted_at IS NULL`,
        kindFilter(params.type),
        ...(params.end_user_id === undefined ? [] : [isUuid(params.end_user_id) ? sql`end_user_id = ${params.end_user_id}` : sql`false`])
      ])
      return paginate(
        params,
        sql<{ total: number }>`SELECT count(*)::int AS total FROM api_keys WHERE ${where}`,
        sql<KeyRow>`SELECT ${sql.literal(COLUMNS)} FROM api_keys WHERE ${where}
          ORDER BY created_at, id LIMIT ${params.limit} OFFSET ${offsetOf(params.page, params.limit)}`.pipe(
          Effect.map((rows) => rows.map(toApiKey))
        )
      ).pipe(Effect.orDie)
    }

    const findRow = (platformId: string, keyId: string, type: KeyType | undefined) =>
      Effect.gen(function*() {
        if (!isUuid(keyId)) return yield* keyNotFound
        const rows = yield* sql<KeyRow>`SELECT ${sql.literal(COLUMNS)} FROM api_keys
          WHERE id = ${keyId} AND platform_id = ${platformId} AND deleted_at IS NULL
          ${type === undefined ? sql`` : sql`AND ${kindFilter(type)}`}`.pipe(Effect.orDie)
        return yield* Option.match(Option.fromNullable(rows[0]), {
          onNone: () => Effect.fail(keyNotFound),
          onSome: Effect.succeed
        })
      })

    const get = (platformId: string, keyId: string) => findRow(platformId, keyId, undefined).pipe(Effect.map(toApiKey))

    const update = (
      platformId: string,
      keyId: string,
      type: KeyType,
      patch: { readonly name?: string | undefined; readonly is_active?: boolean | undefined }
    ) =>
      Effect.gen(function*() {
        const current = yield* findRow(platformId, keyId, type)
        const [row] = yield* sql<KeyRow>`UPDATE api_keys SET
            name = ${patch.name ?? current.name},
            is_active = ${patch.is_active ?? current.is_active},
            updated_at = now()
          WHERE id = ${keyId} AND deleted_at IS NULL RETURNING ${sql.literal(COLUMNS)}`.pipe(Effect.orDie)
        if (row === undefined) return yield* keyNotFound
        if (patch.is_active === false) yield* keyAuth.invalidate({ keyId })
        return toApiKey(row)
      })

    /** Soft delete: the key stops working at once and disappears from reads. */
    const remove = (platformId: string, keyId: string, type: KeyType) =>
      Effect.gen(function*() {
        yield* findRow(platformId, keyId, type)
        const rows = yield* sql`UPDATE api_keys SET is_active = false, deleted_at = now(), updated_at = now()
          WHERE id = ${keyId} AND deleted_at IS NULL RETURNING id`.pipe(Effect.orDie)
        if (rows.length === 0) return yield* keyNotFound
        yield* keyAuth.invalidate({ keyId })
      })

    return { insert, create, list, get, update, remove } as const
  })
}) {}
