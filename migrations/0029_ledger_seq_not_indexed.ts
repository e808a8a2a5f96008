// The ledgers' `seq` columns lose their UNIQUE constraint: a bigserial's values come from its
// sequence, which never hands out one twice, and no query reads a ledger by `seq` alone (every
// listing is by its owner, in (xid, seq) order: migration 0016's indexes). The constraint's
// index was one more index insert for every ledger row, on every call.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

const LEDGERS = ["budget_transactions", "platform_wallet_transactions", "display_transactions"]

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  for (const table of LEDGERS) yield* sql.unsafe(`ALTER TABLE ${table} DROP CONSTRAINT IF EXISTS ${table}_seq_key`)
})
