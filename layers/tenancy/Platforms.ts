// Platforms (tenants): creation by the operator with a first platform key, settings reads and merges.
import { PgClient } from "@effect/sql-pg"
import { Effect, Option } from "effect"
import type { ApiKeyCreated } from "../../schemas/ApiKeys.js"
import { NotFound } from "../../schemas/Errors.js"
import type { Platform, PlatformSettings } from "../../schemas/Platforms.js"
import { isUuid } from "../lib/Ids.js"
import { offsetOf, paginate } from "../lib/Pagination.js"
import { ApiKeys } from "./ApiKeys.js"

interface PlatformRow {
  readonly id: string
  readonly name: string
  readonly settings: PlatformSettings
  readonly skills_enabled: boolean
  readonly created_at: Date
  readonly updated_at: Date
}

const toPlatform = (row: PlatformRow): Platform => row

/** Merges a settings patch: nested objects merge, arrays and scalars replace, null removes. */
export const mergeSettings = (stored: unknown, patch: unknown): unknown => {
  if (!isPlainObject(patch)) return patch
  const out: Record<string, unknown> = isPlainObject(stored) ? { ...stored } : {}
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key]
    else if (value === undefined) continue
    else out[key] = isPlainObject(value) ? mergeSettings(out[key], value) : value
  }
  return out
}

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const platformNotFound = new NotFound({ code: "not_found", message: "No such platform" })

export class Platforms extends Effect.Service<Platforms>()("gateway/Platforms", {
  dependencies: [ApiKeys.Default],
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const apiKeys = yield* ApiKeys

    const find = (id: string) =>
      isUuid(id)
        ? sql<PlatformRow>`SELECT * FROM platforms WHERE id = ${id}`.pipe(
          Effect.map((rows) => Option.fromNullable(rows[0]))
        )
        : Effect.succeed(Option.none<PlatformRow>())

    const get = (id: string) =>
      find(id).pipe(
        Effect.orDie,
        Effect.flatMap(Option.match({ onNone: () => Effect.fail(platformNotFound), onSome: (r) => Effect.succeed(toPlatform(r)) }))
      )


    const create = (input: { readonly name: string; readonly settings?: PlatformSettings | undefined; readonly skills_enabled?: boolean | undefined }) =>
      Effect.gen(function*() {
        const settings = mergeSettings({}, input.settings ?? {})
        const [row] = yield* sql<PlatformRow>`INSERT INTO platforms (name, settings, skills_enabled)
          VALUES (${input.name}, ${sql.json(settings)}, ${input.skills_enabled ?? false}) RETURNING *`
        const apiKey: ApiKeyCreated = yield* apiKeys.insert({ platformId: row!.id, name: "default" })
        return { platform: toPlatform(row!), api_key: apiKey }
      }).pipe(sql.withTransaction, Effect.orDie)

    const list = (params: { readonly page: number; readonly limit: number }) =>
      paginate(
        params,
        sql<{ total: number }>`SELECT count(*)::int AS total FROM platforms`,
        sql<PlatformRow>`SELECT * FROM platforms ORDER BY created_at, id
          LIMIT ${params.limit} OFFSET ${offsetOf(params.page, params.limit)}`.pipe(Effect.map((rows) => rows.map(toPlatform)))
      ).pipe(Effect.orDie)

    const update = (
      id: string,
      patch: { readonly name?: string | undefined; readonly settings?: PlatformSettings | undefined; readonly skills_enabled?: boolean | undefined }
    ) =>
      Effect.gen(function*() {
        const current = yield* find(id).pipe(Effect.orDie)
        if (Option.isNone(current)) return yield* platformNotFound
        // Row lock: two concurrent settings merges must not lose each other's fields.
        const [locked] = yield* sql<PlatformRow>`SELECT * FROM platforms WHERE id = ${id} FOR UPDATE`
        const settings = patch.settings === undefined ? locked!.settings : mergeSettings(locked!.settings, patch.settings)
        const [row] = yield* sql<PlatformRow>`UPDATE platforms SET
            name = ${patch.name ?? locked!.name},
            settings = ${sql.json(settings)},
            skills_enabled = ${patch.skills_enabled ?? locked!.skills_enabled},
            updated_at = now()
          WHERE id = ${id} RETURNING *`
        return toPlatform(row!)
      }).pipe(sql.withTransaction, Effect.catchTag("SqlError", Effect.die))

    return { get, create, list, update } as const
  })
}) {}
