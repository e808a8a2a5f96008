// The Messages API's catalog: model aliases (other names a client may send, such as Anthropic
// model ids, unique across models) and the prices of cached prompt tokens per model provider
// (null: the input price). Log rows of /v1/messages calls are `messages` (request_type is free text).
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE model_aliases (
    alias text PRIMARY KEY,
    model_id uuid NOT NULL REFERENCES models(id) ON DELETE CASCADE
  )`
  yield* sql`CREATE INDEX model_aliases_model ON model_aliases (model_id)`
  yield* sql`ALTER TABLE model_providers
    ADD COLUMN cache_read_usd_per_mtok numeric CHECK (cache_read_usd_per_mtok >= 0),
    ADD COLUMN cache_write_usd_per_mtok numeric CHECK (cache_write_usd_per_mtok >= 0)`
})
