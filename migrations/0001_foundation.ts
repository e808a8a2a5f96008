// Tenants, their end users and API keys, plus the budget tables that end-user creation fills.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE platforms (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name text NOT NULL,
    settings jsonb NOT NULL DEFAULT '{}'::jsonb,
    skills_enabled boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE TABLE end_users (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    external_id text NOT NULL,
    display_name text NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
    is_active boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (platform_id, external_id)
  )`
  yield* sql`CREATE INDEX end_users_platform_created ON end_users (platform_id, created_at, id)`
  yield* sql`CREATE TABLE api_keys (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    end_user_id uuid REFERENCES end_users(id) ON DELETE CASCADE,
    key_hash bytea NOT NULL UNIQUE,
    key_prefix text NOT NULL,
    name text NOT NULL,
    scopes text[] NOT NULL DEFAULT ARRAY['inference'],
    is_active boolean NOT NULL DEFAULT true,
    deleted_at timestamptz,
    last_used_at timestamptz,
    expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE INDEX api_keys_platform_kind ON api_keys (platform_id, (end_user_id IS NULL), created_at, id)`
  yield* sql`CREATE INDEX api_keys_end_user ON api_keys (end_user_id) WHERE end_user_id IS NOT NULL`
  yield* sql`CREATE TABLE budgets (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    end_user_id uuid NOT NULL REFERENCES end_users(id) ON DELETE CASCADE,
    max_usd numeric NOT NULL CHECK (max_usd > 0),
    used_usd numeric NOT NULL DEFAULT 0,
    period text NOT NULL DEFAULT 'one_time' CHECK (period IN ('one_time', 'daily', 'monthly')),
    period_start timestamptz NOT NULL DEFAULT now(),
    auto_replenish boolean NOT NULL DEFAULT false,
    replenish_amount numeric,
    low_balance_threshold numeric,
    low_balance_armed boolean NOT NULL DEFAULT true,
    is_active boolean NOT NULL DEFAULT true,
    is_suspended boolean NOT NULL DEFAULT false,
    deleted_at timestamptz,
    max_display numeric,
    used_display numeric NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
  )`
  // One live (not soft-deleted) budget per end user; deleted ones stay for the audit trail.
  yield* sql`CREATE UNIQUE INDEX budgets_one_live_per_user ON budgets (end_user_id) WHERE deleted_at IS NULL`
  yield* sql`CREATE INDEX budgets_platform ON budgets (platform_id, created_at, id)`
  yield* sql`CREATE TABLE budget_transactions (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq bigserial NOT NULL UNIQUE,
    budget_id uuid NOT NULL REFERENCES budgets(id) ON DELETE CASCADE,
    platform_id uuid NOT NULL,
    type text NOT NULL CHECK (type IN ('opening', 'topup', 'debit', 'adjustment')),
    amount_usd numeric NOT NULL,
    max_usd_before numeric NOT NULL,
    max_usd_after numeric NOT NULL,
    used_usd_before numeric NOT NULL,
    used_usd_after numeric NOT NULL,
    reason text,
    metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
    actor_type text NOT NULL CHECK (actor_type IN ('platform_key', 'end_user_key', 'system')),
    actor_key_id text,
    created_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE INDEX budget_transactions_budget ON budget_transactions (budget_id, created_at, seq)`
  yield* sql`CREATE TABLE end_user_rate_limits (
    end_user_id uuid PRIMARY KEY REFERENCES end_users(id) ON DELETE CASCADE,
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    rpm_limit integer,
    tpm_limit integer,
    rpd_limit integer,
    updated_at timestamptz NOT NULL DEFAULT now()
  )`
})
