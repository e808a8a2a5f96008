// The rows written on every call take time-ordered ids (UUID version 7, RFC 9562) by default, as
// the ids the gateway mints for them (layers/lib/Ids.ts timeOrderedUuid): a primary key index of
// random (version 4) ids takes each insert on a random leaf page, which costs buffer misses and
// full-page WAL images more and more as the table grows; time-ordered keys append at the right
// edge. uuid_v7 is Postgres 18's uuidv7() for the versions before it: the milliseconds of
// clock_timestamp() over the first 48 bits of a random UUID, the version nibble set to 7.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/** The append-only tables with a row per call (log, ledgers). */
const PER_CALL_TABLES = ["inference_logs", "budget_transactions", "platform_wallet_transactions", "display_transactions"]

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE FUNCTION uuid_v7() RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE AS $fn$
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
      PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3) FROM 1 FOR 6),
      52, 1), 53, 1), 'hex')::uuid
  $fn$`
  for (const table of PER_CALL_TABLES) yield* sql.unsafe(`ALTER TABLE ${table} ALTER COLUMN id SET DEFAULT uuid_v7()`)
})
