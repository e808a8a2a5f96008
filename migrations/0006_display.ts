// Display ledger (product units) audit rows: opening, topup and adjustment rows of the admin
// operations on a budget's max_display/used_display (the values live on the budget row).
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE display_transactions (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq bigserial NOT NULL UNIQUE,
    budget_id uuid NOT NULL REFERENCES budgets(id) ON DELETE CASCADE,
    platform_id uuid NOT NULL,
    type text NOT NULL CHECK (type IN ('opening', 'topup', 'adjustment')),
    amount_display numeric NOT NULL,
    max_display_before numeric,
    max_display_after numeric,
    used_display_before numeric NOT NULL,
    used_display_after numeric NOT NULL,
    reason text,
    metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
    actor_type text NOT NULL CHECK (actor_type IN ('platform_key', 'end_user_key', 'system')),
    actor_key_id text,
    created_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE INDEX display_transactions_budget ON display_transactions (budget_id, seq)`
})
