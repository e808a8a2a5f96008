// Platform (tenant) records and their settings, as the operator and platform APIs show them.
import { Schema } from "effect"
import { INT4_MAX, MoneyNumber, strict, Text, Timestamp } from "./Common.js"
import { ApiKeyCreated } from "./ApiKeys.js"

/** Amounts in settings stay JS numbers, within the money bounds (exact: see MoneyNumber). */
const NonNegative = MoneyNumber.pipe(Schema.nonNegative())
const Positive = MoneyNumber.pipe(Schema.positive())

export const DisplayRule = Schema.Union(
  Schema.Struct({ trigger: Schema.Literal("inference_call", "tool_call"), amount: NonNegative }).annotations(strict),
  Schema.Struct({ trigger: Schema.Literal("usd_spent"), amount_per_usd: NonNegative }).annotations(strict)
)
export type DisplayRule = typeof DisplayRule.Type

export const DisplayRules = Schema.Array(DisplayRule).pipe(
  Schema.maxItems(8, { message: () => "at most 8 display rules per platform" }),
  Schema.filter((rules) => new Set(rules.map((r) => r.trigger)).size === rules.length, {
    message: () => "display rules must not repeat a trigger"
  })
)

export const EndUserWalletSettings = Schema.Struct({
  enabled: Schema.optional(Schema.Boolean),
  unit: Schema.optional(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(32))),
  rules: Schema.optional(DisplayRules)
}).annotations(strict)

/** As the `integer` columns of explicit overrides hold limits (null = unlimited). */
const LimitValue = Schema.NullOr(Schema.Int.pipe(Schema.between(1, INT4_MAX)))
export const RateLimitSettings = Schema.Struct({
  rpm_limit: Schema.optional(LimitValue),
  tpm_limit: Schema.optional(LimitValue),
  rpd_limit: Schema.optional(LimitValue)
}).annotations(strict)

export const CapabilityPolicy = Schema.Struct({
  enabled: Schema.optional(Schema.Boolean),
  max_price_usd: Schema.optional(Schema.NullOr(Positive)),
  allowlist: Schema.optional(Schema.NullOr(Schema.Array(Schema.String))),
  denylist: Schema.optional(Schema.Array(Schema.String)),
  charge_failed_calls: Schema.optional(Schema.Boolean)
}).annotations(strict)

export const BudgetEnforcement = Schema.Literal("optimistic", "reserve")
export type BudgetEnforcement = typeof BudgetEnforcement.Type

/** Stored settings; every field optional. */
export const PlatformSettings = Schema.Struct({
  default_budget_usd: Schema.optional(Schema.NullOr(Positive)),
  end_user_wallet: Schema.optional(EndUserWalletSettings),
  default_rate_limits: Schema.optional(RateLimitSettings),
  capabilities: Schema.optional(CapabilityPolicy),
  /**
   * How admission holds a budget: "optimistic" (default) admits while remaining_usd > 0;
   * "reserve" reserves each call's maximum cost on the budget and the wallet first.
   */
  budget_enforcement: Schema.optional(BudgetEnforcement)
}).annotations(strict)
export type PlatformSettings = typeof PlatformSettings.Type

export const Platform = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  // Answers show the settings as stored, bounds left out: values stored before a bound existed
  // must still be readable (and patchable), not a failed encode.
  settings: Schema.encodedSchema(PlatformSettings),
  skills_enabled: Schema.Boolean,
  created_at: Timestamp,
  updated_at: Timestamp
})
export type Platform = typeof Platform.Type

export const PlatformName = Text.pipe(Schema.trimmed(), Schema.minLength(1), Schema.maxLength(100))

export const CreatePlatform = Schema.Struct({
  name: PlatformName,
  settings: Schema.optional(PlatformSettings),
  skills_enabled: Schema.optional(Schema.Boolean)
}).annotations(strict)

/** PATCH body: settings are merged into the stored ones (null removes a field). */
export const UpdatePlatform = Schema.Struct({
  name: Schema.optional(PlatformName),
  settings: Schema.optional(PlatformSettings),
  skills_enabled: Schema.optional(Schema.Boolean)
}).annotations(strict)

export const PlatformCreated = Schema.Struct({ platform: Platform, api_key: ApiKeyCreated })
