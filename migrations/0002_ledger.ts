// Ledger additions: idempotency records (PATCH budget, topup, debit) and the period anchor.
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
  // Monthly periods are counted from this anchor so Jan 31 -> Feb 28/29 -> Mar 31 keeps its day.
  yield* sql`ALTER TABLE budgets ADD COLUMN period_anchor timestamptz`
  yield* sql`UPDATE budgets SET period_anchor = period_start`
  yield* sql`ALTER TABLE budgets ALTER COLUMN period_anchor SET NOT NULL`
})
