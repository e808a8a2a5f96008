// What a model serves: `chat` (chat completions and responses), `embeddings`, or both. Existing
// models serve chat; the pre-flight model check refuses a call of the other kind.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE models ADD COLUMN serves text[] NOT NULL DEFAULT '{chat}'
    CHECK (cardinality(serves) > 0 AND serves <@ '{chat,embeddings}'::text[])`
})
