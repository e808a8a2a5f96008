// The database's identity: one row made when the schema is first migrated. The settlement
// journal (layers/ledger/SettlementJournal.ts) records it, so a journal is only ever replayed into the
// database it was written for (the embedded Postgres gets a new port on every start, so an
// address cannot tell).
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE database_identity (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    created_at timestamptz NOT NULL DEFAULT now(),
    singleton boolean NOT NULL DEFAULT true UNIQUE CHECK (singleton)
  )`
  yield* sql`INSERT INTO database_identity DEFAULT VALUES`
})
