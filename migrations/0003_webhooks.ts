// Webhooks: tenant endpoints, the outbox of budget events (written in the ledger transaction),
// one delivery per (event, endpoint) claimed by dispatchers with a lease, and every attempt.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // event_types NULL = the default set (every type except budget.debited, and future types).
  yield* sql`CREATE TABLE webhook_endpoints (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    url text NOT NULL,
    secret_encrypted text NOT NULL,
    event_types text[],
    is_active boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE INDEX webhook_endpoints_platform ON webhook_endpoints (platform_id, created_at, id)`

  // event_id is the envelope's `<transaction_id>:<event_type>`: a replayed ledger write cannot
  // enqueue the same event twice.
  yield* sql`CREATE TABLE webhook_events (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    event_id text NOT NULL UNIQUE,
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    event_type text NOT NULL,
    payload jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE INDEX webhook_events_platform ON webhook_events (platform_id, created_at)`

  // attempt = attempts made so far; next_attempt_at is NULL once delivered or failed.
  // lease_until marks a claim by one dispatcher; an expired lease (crash) makes the row due again.
  yield* sql`CREATE TABLE webhook_deliveries (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    event_id uuid NOT NULL REFERENCES webhook_events(id) ON DELETE CASCADE,
    endpoint_id uuid NOT NULL REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempt integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz DEFAULT now(),
    lease_until timestamptz,
    last_http_status integer,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (event_id, endpoint_id)
  )`
  yield* sql`CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at)`
  yield* sql`CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, created_at DESC, id DESC)`

  yield* sql`CREATE TABLE webhook_delivery_attempts (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    delivery_id uuid NOT NULL REFERENCES webhook_deliveries(id) ON DELETE CASCADE,
    attempt integer NOT NULL,
    http_status integer,
    error text,
    created_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE INDEX webhook_delivery_attempts_delivery ON webhook_delivery_attempts (delivery_id, attempt)`
})
