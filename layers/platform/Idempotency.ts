// Idempotency-Key handling for ledger mutations: scoped to (platform, operation, target), kept
// 24 h with a hash of the canonical body. Runs inside the caller's transaction: a concurrent
// duplicate blocks on the key row until the first commits, then replays its response.
import { PgClient } from "@effect/sql-pg"
import { Effect, Schema } from "effect"
import { createHash } from "node:crypto"
import { Conflict } from "../../schemas/Errors.js"

export interface IdempotencyScope {
  readonly platformId: string
  readonly operation: string
  readonly target: string
}

/** JSON with object keys sorted, so equal bodies hash equally whatever their key order. */
const canonical = (value: unknown): string =>
  JSON.stringify(value, (_k, v: unknown) =>
    v !== null && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => a.localeCompare(b)))
      : v)

export class Idempotency extends Effect.Service<Idempotency>()("gateway/Idempotency", {
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient

    /**
     * Applies `apply` once per key; a repeat with the same body returns the stored response
     * (replay true), a different body fails with 409 idempotency_conflict. Without a key every
     * call applies. Must run inside a transaction.
     */
    const once = <A, I, E, R>(
      scope: IdempotencyScope,
      key: string | undefined,
      body: unknown,
      response: Schema.Schema<A, I>,
      apply: Effect.Effect<A, E, R>
    ) =>
      Effect.gen(function*() {
        if (key === undefined) return { value: yield* apply, replay: false }
        const hash = createHash("sha256").update(canonical(body)).digest("hex")
        const where = sql`platform_id = ${scope.platformId} AND operation = ${scope.operation}
          AND target = ${scope.target} AND key = ${key}`
        yield* sql`DELETE FROM idempotency_keys WHERE ${where} AND created_at < now() - interval '24 hours'`
        const claimed = yield* sql`INSERT INTO idempotency_keys (platform_id, operation, target, key, body_hash, response)
          VALUES (${scope.platformId}, ${scope.operation}, ${scope.target}, ${key}, ${hash}, 'null'::jsonb)
          ON CONFLICT DO NOTHING RETURNING 1`
        if (claimed.length === 0) {
          const [stored] = yield* sql<{ body_hash: string; response: unknown }>`
            SELECT body_hash, response FROM idempotency_keys WHERE ${where}`
          if (stored === undefined || stored.body_hash !== hash) {
            return yield* new Conflict({
              code: "idempotency_conflict",
              param: "Idempotency-Key",
              message: "This Idempotency-Key was already used with a different request body"
            })
          }
          return { value: yield* Schema.decodeUnknown(response)(stored.response).pipe(Effect.orDie), replay: true }
        }
        const value = yield* apply
        const encoded = yield* Schema.encode(response)(value).pipe(Effect.orDie)
        yield* sql`UPDATE idempotency_keys SET response = ${sql.json(encoded)} WHERE ${where}`
        return { value, replay: false }
      }).pipe(Effect.catchTag("SqlError", Effect.die))

    return { once } as const
  })
}) {}
