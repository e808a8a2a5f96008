// Stored responses (Responses API): per end user, so previous_response_id can load the chain.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE responses (
    id text PRIMARY KEY,
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    end_user_id uuid REFERENCES end_users(id) ON DELETE CASCADE,
    previous_response_id text,
    thread_id text,
    model text NOT NULL,
    instructions text,
    input_items jsonb NOT NULL,
    output_items jsonb NOT NULL,
    usage jsonb,
    status text NOT NULL,
    request jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE INDEX responses_owner ON responses (platform_id, end_user_id, created_at)`
  yield* sql`CREATE INDEX responses_thread ON responses (platform_id, thread_id) WHERE thread_id IS NOT NULL`
})
