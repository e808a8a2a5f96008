// Tool service tables: apps activated per platform, end users' OAuth connections, single-use
// OAuth states, and the monthly free-tier counter of tool calls per platform.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // One row per (platform, app); a re-activation updates it in place.
  yield* sql`CREATE TABLE platform_tool_apps (
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    app_slug text NOT NULL,
    client_id text NOT NULL,
    client_secret_encrypted text NOT NULL,
    base_url text NOT NULL,
    is_active boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (platform_id, app_slug)
  )`
  // Tokens are AES-256-GCM sealed (Crypto); a disconnect clears them and keeps the row for audit.
  yield* sql`CREATE TABLE tool_connections (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    end_user_id uuid NOT NULL REFERENCES end_users(id) ON DELETE CASCADE,
    app_slug text NOT NULL,
    access_token_encrypted text,
    refresh_token_encrypted text,
    expires_at timestamptz,
    needs_reauth boolean NOT NULL DEFAULT false,
    is_active boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE UNIQUE INDEX tool_connections_one_active ON tool_connections (end_user_id, app_slug) WHERE is_active`
  yield* sql`CREATE INDEX tool_connections_platform ON tool_connections (platform_id)`
  // The OAuth `state` names a row here (id = nonce); used_at makes it single use.
  yield* sql`CREATE TABLE oauth_states (
    id uuid PRIMARY KEY,
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    end_user_id uuid NOT NULL REFERENCES end_users(id) ON DELETE CASCADE,
    app_slug text NOT NULL,
    code_verifier_encrypted text,
    redirect_uri text NOT NULL,
    expires_at timestamptz NOT NULL,
    used_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE INDEX oauth_states_expires ON oauth_states (expires_at)`
  // month = first day of the UTC calendar month; a new month is a new row, so the count resets.
  yield* sql`CREATE TABLE tool_call_counters (
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    month date NOT NULL,
    count bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (platform_id, month)
  )`
})
