// Call records: each model call in flight, with what it comes to if its instance dies before
// settling it (layers/ledger/CallRecords.ts). Rows live from the call's start to its settlement.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE call_records (
    id uuid PRIMARY KEY,
    instance_id uuid NOT NULL,
    settlement jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE INDEX call_records_instance ON call_records (instance_id)`
})
