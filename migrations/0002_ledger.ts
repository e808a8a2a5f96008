// Ledger additions: idempotency records for PATCH budget, topup and debit.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE idempotency_keys (
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    operation text NOT NULL,
    target text NOT NULL,
    key text NOT NULL,
    body_hash text NOT NULL,
    response jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (platform_id, operation, target, key)
  )`
  yield* sql`CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at)`
})
