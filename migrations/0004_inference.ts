// Inference catalog and money: providers, models and their provider configs, platform
// provider keys (encrypted), the platform wallet with its ledger, and the inference log.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE providers (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    slug text NOT NULL UNIQUE,
    kind text NOT NULL CHECK (kind IN ('openai', 'openai-responses', 'anthropic', 'mock')),
    base_url text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE TABLE models (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    slug text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE TABLE model_providers (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    model_id uuid NOT NULL REFERENCES models(id) ON DELETE CASCADE,
    provider_id uuid NOT NULL REFERENCES providers(id) ON DELETE CASCADE,
    provider_model_id text NOT NULL,
    priority integer NOT NULL DEFAULT 0,
    weight integer NOT NULL DEFAULT 1 CHECK (weight >= 0),
    enabled boolean NOT NULL DEFAULT true,
    input_usd_per_mtok numeric NOT NULL DEFAULT 0 CHECK (input_usd_per_mtok >= 0),
    output_usd_per_mtok numeric NOT NULL DEFAULT 0 CHECK (output_usd_per_mtok >= 0),
    UNIQUE (model_id, provider_id)
  )`
  yield* sql`CREATE TABLE platform_provider_keys (
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    provider_id uuid NOT NULL REFERENCES providers(id) ON DELETE CASCADE,
    key_encrypted text NOT NULL,
    key_hint text NOT NULL,
    is_active boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (platform_id, provider_id)
  )`
  yield* sql`CREATE TABLE platform_wallets (
    platform_id uuid PRIMARY KEY REFERENCES platforms(id) ON DELETE CASCADE,
    balance_usd numeric NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE TABLE platform_wallet_transactions (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq bigserial NOT NULL UNIQUE,
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    type text NOT NULL CHECK (type IN ('topup', 'debit')),
    amount_usd numeric NOT NULL,
    balance_before numeric NOT NULL,
    balance_after numeric NOT NULL,
    reason text,
    metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE INDEX platform_wallet_transactions_platform ON platform_wallet_transactions (platform_id, seq)`
  yield* sql`CREATE TABLE inference_logs (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    end_user_id uuid,
    request_type text NOT NULL,
    provider_id uuid,
    model_id uuid,
    model_slug text,
    provider_model_id text,
    prompt_tokens integer NOT NULL DEFAULT 0,
    completion_tokens integer NOT NULL DEFAULT 0,
    total_tokens integer NOT NULL DEFAULT 0,
    latency_ms integer NOT NULL DEFAULT 0,
    estimated_cost_usd numeric NOT NULL DEFAULT 0,
    status text NOT NULL,
    error_message text,
    token_count_method text NOT NULL,
    billing_status text NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE INDEX inference_logs_platform ON inference_logs (platform_id, created_at DESC, id)`
})
