// MCP sessions shared by the fleet: any instance serves any request of a session, so what must
// outlive one request (the key it is bound to, its lifetime and idle time, what initialize
// negotiated) is a row here. Rows are short-lived (30 minutes at most) and carry no foreign keys.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // id: the Mcp-Session-Id (text: a client may send anything there; unknown is a plain miss).
  // running: tool calls and listings in progress, which keep the session from going idle.
  yield* sql`CREATE TABLE mcp_sessions (
    id text PRIMARY KEY,
    platform_id uuid NOT NULL,
    end_user_id uuid NOT NULL,
    key_id uuid NOT NULL,
    app_slug text NOT NULL,
    protocol_version text NOT NULL,
    client_info jsonb NOT NULL,
    client_capabilities jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    idle_millis integer NOT NULL,
    last_seen_at timestamptz NOT NULL,
    running integer NOT NULL DEFAULT 0
  )`
  // The caps count a platform's and a key's open sessions at every initialize.
  yield* sql`CREATE INDEX mcp_sessions_platform ON mcp_sessions (platform_id)`
  yield* sql`CREATE INDEX mcp_sessions_key ON mcp_sessions (key_id, last_seen_at)`
})
