// Capabilities: the paid-provider catalog (capabilities and their providers, full-text searchable)
// and capability runs, whose `open` rows are the budget holds that count against remaining_usd.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // array_to_string is only STABLE; generated columns need IMMUTABLE expressions. Joining text
  // elements with a space does not depend on any setting, so the wrapper may say IMMUTABLE.
  yield* sql`CREATE FUNCTION capability_words(text[]) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT coalesce(array_to_string($1, ' '), '') $$`
  yield* sql`CREATE TABLE capabilities (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    slug text NOT NULL UNIQUE,
    name text NOT NULL,
    description text,
    domains text[] NOT NULL DEFAULT '{}',
    minted_by text NOT NULL DEFAULT 'seed' CHECK (minted_by IN ('seed', 'classifier')),
    is_active boolean NOT NULL DEFAULT true,
    -- who wrote the row last: a seed re-run never overwrites a row the operator refreshed
    source text NOT NULL DEFAULT 'seed' CHECK (source IN ('seed', 'admin')),
    search tsvector GENERATED ALWAYS AS (
      setweight(to_tsvector('english', coalesce(name, '') || ' ' || replace(slug, '-', ' ')), 'A') ||
      setweight(to_tsvector('english', capability_words(domains)), 'B') ||
      setweight(to_tsvector('english', coalesce(description, '')), 'C')
    ) STORED,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE INDEX capabilities_search ON capabilities USING gin (search)`
  yield* sql`CREATE TABLE capability_providers (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    capability_id uuid NOT NULL REFERENCES capabilities(id) ON DELETE CASCADE,
    slug text NOT NULL,
    name text,
    description text,
    url text,
    call_method text NOT NULL DEFAULT 'POST',
    protocol text NOT NULL DEFAULT 'http',
    min_price_usd numeric CHECK (min_price_usd >= 0),
    median_price_usd numeric CHECK (median_price_usd >= 0),
    max_price_usd numeric CHECK (max_price_usd >= 0),
    rating numeric CHECK (rating BETWEEN 0 AND 5),
    availability text NOT NULL DEFAULT 'unknown' CHECK (availability IN ('healthy', 'unknown', 'down')),
    last_synced_at timestamptz,
    input_example jsonb,
    input_schema jsonb,
    is_active boolean NOT NULL DEFAULT true,
    source text NOT NULL DEFAULT 'seed' CHECK (source IN ('seed', 'admin')),
    search tsvector GENERATED ALWAYS AS (
      setweight(to_tsvector('english', coalesce(name, '') || ' ' || replace(slug, '-', ' ')), 'A') ||
      setweight(to_tsvector('english', coalesce(description, '')), 'C')
    ) STORED,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (capability_id, slug)
  )`
  yield* sql`CREATE INDEX capability_providers_search ON capability_providers USING gin (search)`
  // One row per run. state 'open' = a live hold of hold_usd on budget_id; every other state is
  // settled. No foreign key to the catalog provider: a run's audit row outlives catalog edits.
  yield* sql`CREATE TABLE capability_runs (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    end_user_id uuid NOT NULL REFERENCES end_users(id) ON DELETE CASCADE,
    budget_id uuid REFERENCES budgets(id) ON DELETE SET NULL,
    api_key_id uuid,
    capability_id uuid NOT NULL,
    provider_id uuid NOT NULL,
    hold_usd numeric NOT NULL CHECK (hold_usd >= 0),
    state text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'billed', 'released', 'failed')),
    cost_usd numeric,
    status integer,
    ok boolean,
    error_message text,
    created_at timestamptz NOT NULL DEFAULT now(),
    settled_at timestamptz,
    expires_at timestamptz NOT NULL
  )`
  // The hold sum is read on every run and (later) every inference pre-flight: keep it an index scan.
  yield* sql`CREATE INDEX capability_runs_open_by_budget ON capability_runs (budget_id) WHERE state = 'open'`
  yield* sql`CREATE INDEX capability_runs_open_by_platform ON capability_runs (platform_id) WHERE state = 'open'`
  yield* sql`CREATE INDEX capability_runs_open_expiry ON capability_runs (expires_at) WHERE state = 'open'`
  yield* sql`CREATE INDEX capability_runs_platform ON capability_runs (platform_id, created_at DESC)`
})
