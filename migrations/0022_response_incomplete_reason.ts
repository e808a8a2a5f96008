// Why a stored response ended incomplete (Hosted.IncompleteReason), so GET /v1/responses/{id}
// answers the same incomplete_details as the create call did. Null for completed responses and
// for rows stored before the column existed.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE responses ADD COLUMN incomplete_reason text`
})
