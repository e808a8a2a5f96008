// Agent models: a model marked `agent` runs the Responses API's hybrid tool loop with the caller's
// per-user tool URL's tools, its model calls logged as `agent`. Existing models are plain.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE models ADD COLUMN agent boolean NOT NULL DEFAULT false`
})
