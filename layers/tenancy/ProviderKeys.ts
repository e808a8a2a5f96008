// A platform's own keys for upstream providers: stored AES-256-GCM encrypted; reads show only
// the last four characters.
import { PgClient } from "@effect/sql-pg"
import { Effect } from "effect"
import { NotFound } from "../../schemas/Errors.js"
import { Crypto } from "../platform/Crypto.js"

interface KeyRow {
  readonly provider: string
  readonly key_hint: string
  readonly is_active: boolean
  readonly created_at: Date
  readonly updated_at: Date
}

const noProvider = new NotFound({ code: "not_found", message: "No such provider" })
const noKey = new NotFound({ code: "not_found", message: "No key stored for this provider" })

export class ProviderKeys extends Effect.Service<ProviderKeys>()("gateway/ProviderKeys", {
  dependencies: [Crypto.Default],
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const crypto = yield* Crypto

    const providerId = (slug: string) =>
      sql<{ id: string }>`SELECT id FROM providers WHERE slug = ${slug}`.pipe(
        Effect.orDie,
        Effect.flatMap((rows) => rows[0] === undefined ? Effect.fail(noProvider) : Effect.succeed(rows[0].id))
      )

    const put = (platformId: string, provider: string, apiKey: string) =>
      Effect.gen(function*() {
        const id = yield* providerId(provider)
        const [row] = yield* sql<KeyRow>`INSERT INTO platform_provider_keys (platform_id, provider_id, key_encrypted, key_hint)
          VALUES (${platformId}, ${id}, ${crypto.encrypt(apiKey)}, ${apiKey.slice(-4)})
          ON CONFLICT (platform_id, provider_id) DO UPDATE SET key_encrypted = excluded.key_encrypted,
            key_hint = excluded.key_hint, is_active = true, updated_at = now()
          RETURNING ${provider}::text AS provider, key_hint, is_active, created_at, updated_at`.pipe(Effect.orDie)
        return row!
      })

    const get = (platformId: string, provider: string) =>
      Effect.gen(function*() {
        const id = yield* providerId(provider)
        const [row] = yield* sql<KeyRow>`SELECT ${provider}::text AS provider, key_hint, is_active, created_at, updated_at
          FROM platform_provider_keys WHERE platform_id = ${platformId} AND provider_id = ${id}`.pipe(Effect.orDie)
        if (row === undefined) return yield* noKey
        return row
      })

    const remove = (platformId: string, provider: string) =>
      Effect.gen(function*() {
        const id = yield* providerId(provider)
        const rows = yield* sql`DELETE FROM platform_provider_keys WHERE platform_id = ${platformId} AND provider_id = ${id}
          RETURNING 1`.pipe(Effect.orDie)
        if (rows.length === 0) return yield* noKey
      })

    /** The plaintext key, for the upstream call only (never returned to a caller). */
    const reveal = (sealed: string) => crypto.decrypt(sealed)

    return { put, get, remove, reveal } as const
  })
}) {}
