// Providers, models and their provider configurations (operator plane), platform provider keys,
// the platform wallet, and the OpenAI-shaped model list.
import { BigDecimal, Schema } from "effect"
import { BackfillList, Int4, INT4_MAX, JsonObject, NonNegativeMoney, PositiveMoney, RowCursor, strict, Text, Timestamp, Usd } from "./Common.js"

export const ProviderKind = Schema.Literal("openai", "openai-responses", "anthropic", "mock")
export type ProviderKind = typeof ProviderKind.Type

/** What a model serves: `chat` (chat completions and responses) and/or `embeddings`. */
export const ModelOperation = Schema.Literal("chat", "embeddings")
export type ModelOperation = typeof ModelOperation.Type

/** The provider kinds whose adapter serves embeddings (POST {base_url}/embeddings, or offline for mock). */
export const EMBEDDING_KINDS: ReadonlyArray<ProviderKind> = ["openai", "mock"]
const Slug = Schema.String.pipe(Schema.pattern(/^[a-z0-9][a-z0-9._-]{0,99}$/))
/** Another name of a model a client may send (e.g. an Anthropic model id such as `claude-sonnet-4-5`). */
const Alias = Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,199}$/))
const HttpUrl = Schema.String.pipe(Schema.pattern(/^https?:\/\/[^\s]+$/))

export const ProviderInput = Schema.Struct({ slug: Slug, kind: ProviderKind, base_url: HttpUrl }).annotations(strict)
export type ProviderInput = typeof ProviderInput.Type

export const Provider = Schema.Struct({
  id: Schema.String,
  slug: Schema.String,
  kind: ProviderKind,
  base_url: Schema.String,
  created_at: Timestamp,
  updated_at: Timestamp
})

export const ModelProviderInput = Schema.Struct({
  provider: Slug,
  provider_model_id: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200)),
  priority: Schema.optionalWith(Int4, { default: () => 0 }),
  weight: Schema.optionalWith(Int4.pipe(Schema.nonNegative()), { default: () => 1 }),
  enabled: Schema.optionalWith(Schema.Boolean, { default: () => true }),
  input_usd_per_mtok: Schema.optionalWith(NonNegativeMoney, { default: () => BigDecimal.make(0n, 0) }),
  output_usd_per_mtok: Schema.optionalWith(NonNegativeMoney, { default: () => BigDecimal.make(0n, 0) }),
  /** Prompt tokens read from the provider's prompt cache (Anthropic cache_read_input_tokens); null: the input price. */
  cache_read_usd_per_mtok: Schema.optionalWith(Schema.NullOr(NonNegativeMoney), { default: () => null }),
  /** Prompt tokens written to the provider's prompt cache (Anthropic cache_creation_input_tokens); null: the input price. */
  cache_write_usd_per_mtok: Schema.optionalWith(Schema.NullOr(NonNegativeMoney), { default: () => null })
}).annotations(strict)

export const ModelInput = Schema.Struct({
  slug: Slug,
  serves: Schema.optionalWith(
    Schema.NonEmptyArray(ModelOperation).pipe(Schema.filter((ops) => new Set(ops).size === ops.length, { message: () => "an operation is listed twice" })),
    { default: () => ["chat"] }
  ),
  /** An agent model: its Responses API calls run the hybrid tool loop with the caller's per-user tools. */
  agent: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  /** Other names clients may call the model by, unique across models and slugs; replaces the model's list. */
  aliases: Schema.optionalWith(
    Schema.Array(Alias).pipe(Schema.maxItems(100), Schema.filter((names) => new Set(names).size === names.length, { message: () => "an alias is listed twice" })),
    { default: () => [] }
  ),
  providers: Schema.Array(ModelProviderInput)
}).annotations(strict)
export type ModelInput = typeof ModelInput.Type

export const ModelConfig = Schema.Struct({
  id: Schema.String,
  slug: Schema.String,
  serves: Schema.Array(ModelOperation),
  agent: Schema.Boolean,
  aliases: Schema.Array(Schema.String),
  providers: Schema.Array(Schema.Struct({
    provider: Schema.String,
    provider_model_id: Schema.String,
    priority: Schema.Int,
    weight: Schema.Int,
    enabled: Schema.Boolean,
    input_usd_per_mtok: Usd,
    output_usd_per_mtok: Usd,
    cache_read_usd_per_mtok: Schema.NullOr(Usd),
    cache_write_usd_per_mtok: Schema.NullOr(Usd)
  })),
  created_at: Timestamp
})
export type ModelConfig = typeof ModelConfig.Type

/** GET /v1/models (OpenAI shape). */
export const Model = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("model"),
  created: Schema.Int,
  owned_by: Schema.String
})
export const ModelList = Schema.Struct({ object: Schema.Literal("list"), data: Schema.Array(Model) })

/** The `{model}` of GET /v1/models/{model}: a model slug. */
export const ModelPath = Schema.Struct({ model: Schema.String })

export const PutProviderKey = Schema.Struct({
  api_key: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(4096))
}).annotations(strict)

/** A platform's key for a provider: never the key itself, only its last 4 characters. */
export const ProviderKey = Schema.Struct({
  provider: Schema.String,
  key_hint: Schema.String,
  is_active: Schema.Boolean,
  created_at: Timestamp,
  updated_at: Timestamp
})

export const PlatformWallet = Schema.Struct({ balance_usd: Usd, updated_at: Timestamp })

/** A platform wallet ledger row: a topup, or the debit of one settled call, tool call or capability run. */
export const PlatformWalletTransaction = Schema.Struct({
  id: Schema.String,
  type: Schema.Literal("topup", "debit"),
  amount_usd: Usd,
  balance_before_usd: Usd,
  balance_after_usd: Usd,
  reason: Schema.NullOr(Schema.String),
  log_id: Schema.NullOr(Schema.String).annotations({ description: "The inference log entry of the call this debit paid for" }),
  request_id: Schema.NullOr(Schema.String).annotations({ description: "The paid call's request id (debits of model calls)" }),
  metadata: JsonObject,
  created_at: Timestamp,
  cursor: RowCursor
})
export type PlatformWalletTransaction = typeof PlatformWalletTransaction.Type
export const PlatformWalletTransactions = BackfillList(PlatformWalletTransaction)

export const WalletTopup = Schema.Struct({
  amount_usd: PositiveMoney,
  reason: Schema.optional(Text.pipe(Schema.maxLength(500)))
}).annotations(strict)

/** A limit as the `integer` columns hold it (null = unlimited). */
const LimitValue = Schema.NullOr(Schema.Int.pipe(Schema.between(1, INT4_MAX)))

/** PUT body of a user's rate-limit override (null = unlimited for that dimension). */
export const RateLimitOverride = Schema.Struct({
  rpm_limit: Schema.optionalWith(LimitValue, { default: () => null }),
  tpm_limit: Schema.optionalWith(LimitValue, { default: () => null }),
  rpd_limit: Schema.optionalWith(LimitValue, { default: () => null })
}).annotations(strict)

/** Effective limits (spec "Rate limits"): resolution explicit > default > none. */
export const EffectiveRateLimits = Schema.Struct({
  rpm_limit: Schema.NullOr(Schema.Int),
  tpm_limit: Schema.NullOr(Schema.Int),
  rpd_limit: Schema.NullOr(Schema.Int),
  resolution: Schema.Literal("explicit", "default", "none")
})
export type EffectiveRateLimits = typeof EffectiveRateLimits.Type
