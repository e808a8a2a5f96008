// The backfill order of the ledgers (budget, platform wallet, display): each row records the
// transaction that wrote it, and listings page in (xid, seq) order up to the oldest transaction
// still in flight, so a row can never become visible behind a position a poller has passed
// (layers/ledger/BackfillPage.ts). Webhook delivery attempts record their outcome and the retry
// they scheduled, so every attempt is readable as it happened.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  for (const table of ["budget_transactions", "platform_wallet_transactions", "display_transactions"]) {
    // A constant default first: existing rows read as xid 0 (all committed, ordered by seq)
    // without a table rewrite; rows written from now on record their own transaction.
    yield* sql`ALTER TABLE ${sql(table)} ADD COLUMN xid xid8 NOT NULL DEFAULT '0'`
    yield* sql`ALTER TABLE ${sql(table)} ALTER COLUMN xid SET DEFAULT pg_current_xact_id()`
  }
  // Each index is what its listing filters and orders by; the budget index replaces the one on
  // created_at, which only the listing read.
  yield* sql`DROP INDEX budget_transactions_budget`
  yield* sql`CREATE INDEX budget_transactions_budget ON budget_transactions (budget_id, xid, seq)`
  yield* sql`DROP INDEX platform_wallet_transactions_platform`
  yield* sql`CREATE INDEX platform_wallet_transactions_platform ON platform_wallet_transactions (platform_id, xid, seq)`
  yield* sql`DROP INDEX display_transactions_budget`
  yield* sql`CREATE INDEX display_transactions_budget ON display_transactions (budget_id, xid, seq)`

  // A wallet debit names the call it paid for by the call's request_id (the settlement writes it
  // into both rows); the listing finds the call's log row through this index.
  yield* sql`CREATE INDEX inference_logs_request ON inference_logs (platform_id, (metadata->>'request_id'))
    WHERE metadata ? 'request_id'`

  yield* sql`ALTER TABLE webhook_delivery_attempts
    ADD COLUMN status text CHECK (status IN ('delivered', 'retry', 'failed')),
    ADD COLUMN next_attempt_at timestamptz`
  // Attempts recorded before these columns: the outcome follows from the error and from what
  // came after (a later attempt means a retry was scheduled).
  yield* sql`UPDATE webhook_delivery_attempts a SET
      status = CASE
        WHEN a.error IS NULL THEN 'delivered'
        WHEN EXISTS (SELECT 1 FROM webhook_delivery_attempts later
          WHERE later.delivery_id = a.delivery_id AND later.attempt > a.attempt) THEN 'retry'
        WHEN d.status = 'pending' THEN 'retry'
        ELSE 'failed' END,
      next_attempt_at = CASE WHEN a.error IS NOT NULL AND d.status = 'pending' AND a.attempt = d.attempt
        THEN d.next_attempt_at END
    FROM webhook_deliveries d WHERE d.id = a.delivery_id`
})
