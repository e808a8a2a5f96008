// Wire shapes of the capabilities endpoints: the shelf, providers with their policy state, search,
// runs, and the catalog input (the seed file and the operator upsert share one shape).
import { BigDecimal, Schema } from "effect"
import { DateInput, JsonObject, NonNegativeMoney, PositiveMoney, strict, Text, Usd } from "./Common.js"

const Slug = Text.pipe(Schema.pattern(/^[a-z0-9][a-z0-9._-]{0,99}$/, { message: () => "lowercase letters, digits, '.', '_' or '-', 1-100 chars" }))
/** Prices in answers; NullablePrice is the same field in the catalog input (exact, bounded). */
const NullableUsd = Schema.NullOr(Usd)
const NullablePrice = Schema.NullOr(NonNegativeMoney)
const Rating = Schema.Number.pipe(Schema.between(0, 5))

export const PolicyState = Schema.Literal("in_policy", "denylisted", "not_allowlisted", "above_ceiling")
export type PolicyState = typeof PolicyState.Type
export const Availability = Schema.Literal("healthy", "unknown", "down")
export type Availability = typeof Availability.Type

/** One capability on the shelf, as the platform sees it. */
export const CapabilityShelf = Schema.Struct({
  slug: Schema.String,
  name: Schema.String,
  description: Schema.NullOr(Schema.String),
  provider_count: Schema.Int,
  in_policy_count: Schema.Int,
  min_price_usd: NullableUsd,
  minted_by: Schema.Literal("seed", "classifier"),
  domains: Schema.Array(Schema.String)
})
export type CapabilityShelf = typeof CapabilityShelf.Type

export const CapabilityList = Schema.Struct({ enabled: Schema.Boolean, capabilities: Schema.Array(CapabilityShelf) })
export type CapabilityList = typeof CapabilityList.Type

/** One provider under a capability, with the platform's policy verdict. */
export const CapabilityProvider = Schema.Struct({
  uid: Schema.String,
  slug: Schema.NullOr(Schema.String),
  name: Schema.NullOr(Schema.String),
  description: Schema.NullOr(Schema.String),
  url: Schema.NullOr(Schema.String),
  min_price_usd: NullableUsd,
  median_price_usd: NullableUsd,
  max_price_usd: NullableUsd,
  rating: Schema.NullOr(Schema.Number),
  availability: Availability,
  last_synced_at: Schema.NullOr(Schema.Date),
  policy_state: PolicyState,
  call_method: Schema.NullOr(Schema.String),
  input_example: Schema.NullOr(Schema.Unknown),
  input_schema: Schema.NullOr(Schema.Unknown)
})
export type CapabilityProvider = typeof CapabilityProvider.Type

export const CapabilityDetail = Schema.Struct({
  slug: Schema.String,
  name: Schema.String,
  description: Schema.NullOr(Schema.String),
  enabled: Schema.Boolean,
  providers: Schema.Array(CapabilityProvider)
})
export type CapabilityDetail = typeof CapabilityDetail.Type

/** Server cap on a provider list (the spec leaves it open): larger `limit`s are clamped. */
export const PROVIDER_LIST_CAP = 100

const BooleanParam = Schema.transform(Schema.Literal("true", "false", "1", "0"), Schema.Boolean, {
  strict: true,
  decode: (s) => s === "true" || s === "1",
  encode: (b) => (b ? "true" : "false")
})

/** GET /v1/capabilities/{slug} query; every field optional. */
export const ProviderQuery = Schema.Struct({
  sort: Schema.optional(Schema.Literal("cost", "rating")),
  max_cost: Schema.optional(Schema.NumberFromString.pipe(Schema.finite(), Schema.nonNegative())),
  min_rating: Schema.optional(Schema.NumberFromString.pipe(Schema.between(0, 5))),
  verified_only: Schema.optional(BooleanParam),
  limit: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.greaterThanOrEqualTo(1)))
})
export type ProviderQuery = typeof ProviderQuery.Type

/** The same query as plain values, for the agent tool (list_providers). */
export interface ProviderFilter {
  readonly sort?: "cost" | "rating" | undefined
  readonly max_cost?: number | undefined
  readonly min_rating?: number | undefined
  readonly verified_only?: boolean | undefined
  readonly limit?: number | undefined
}

export const SearchRequest = Schema.Struct({
  query: Text.pipe(
    Schema.minLength(1),
    Schema.maxLength(500),
    Schema.filter((s) => s.trim().length > 0, { message: () => "query must not be blank" })
  ),
  limit: Schema.optionalWith(Schema.Int.pipe(Schema.between(1, 25)), { default: () => 8 })
}).annotations(strict)
export type SearchRequest = typeof SearchRequest.Type

export const SearchCandidate = Schema.Struct({
  uid: Schema.String,
  slug: Schema.NullOr(Schema.String),
  name: Schema.NullOr(Schema.String),
  description: Schema.NullOr(Schema.String),
  url: Schema.NullOr(Schema.String),
  /** What a run reserves (the provider's max price, capped by the platform ceiling). */
  cost_usd: Usd,
  protocol: Schema.String,
  rating: Schema.NullOr(Schema.Number)
})
export type SearchCandidate = typeof SearchCandidate.Type

export const SearchResponse = Schema.Struct({ candidates: Schema.Array(SearchCandidate) })
export type SearchResponse = typeof SearchResponse.Type

export const RunRequest = Schema.Struct({
  capability: Text.pipe(Schema.minLength(1), Schema.maxLength(200)),
  input: Schema.optional(Schema.NullOr(JsonObject)),
  max_pay: Schema.optional(PositiveMoney)
}).annotations(strict)
export type RunRequest = typeof RunRequest.Type

export const FinalState = Schema.Literal("released", "billed", "failed")
export type FinalState = typeof FinalState.Type

export const RunResponse = Schema.Struct({
  capability: Schema.String,
  ok: Schema.Boolean,
  final_state: FinalState,
  status: Schema.NullOr(Schema.Int),
  cost_usd: NullableUsd,
  charged_end_user: Schema.NullOr(Schema.Boolean),
  run_id: Schema.NullOr(Schema.String),
  result: Schema.Unknown
})
export type RunResponse = typeof RunResponse.Type

// --- catalog input: the seed file and POST /v1/admin/capabilities/providers -----------------

const HttpMethod = Schema.Literal("GET", "POST", "PUT", "PATCH", "DELETE")

export const CapabilityInput = Schema.Struct({
  slug: Slug,
  name: Text.pipe(Schema.minLength(1), Schema.maxLength(200)),
  description: Schema.optional(Schema.NullOr(Text.pipe(Schema.maxLength(2000)))),
  domains: Schema.optional(Schema.Array(Text.pipe(Schema.minLength(1), Schema.maxLength(64))).pipe(Schema.maxItems(32))),
  minted_by: Schema.optional(Schema.Literal("seed", "classifier")),
  is_active: Schema.optional(Schema.Boolean)
}).annotations(strict)
export type CapabilityInput = typeof CapabilityInput.Type

const providerFields = {
  slug: Slug,
  name: Schema.optional(Schema.NullOr(Text.pipe(Schema.maxLength(200)))),
  description: Schema.optional(Schema.NullOr(Text.pipe(Schema.maxLength(2000)))),
  url: Text.pipe(
    Schema.maxLength(2048),
    Schema.filter((s) => {
      try {
        const u = new URL(s)
        return u.protocol === "http:" || u.protocol === "https:"
      } catch {
        return false
      }
    }, { message: () => "url must be an absolute http or https URL" })
  ),
  call_method: Schema.optionalWith(HttpMethod, { default: () => "POST" as const }),
  protocol: Schema.optionalWith(Text.pipe(Schema.minLength(1), Schema.maxLength(32)), { default: () => "http" }),
  min_price_usd: Schema.optional(NullablePrice),
  median_price_usd: Schema.optional(NullablePrice),
  max_price_usd: Schema.optional(NullablePrice),
  rating: Schema.optional(Schema.NullOr(Rating)),
  availability: Schema.optional(Availability),
  last_synced_at: Schema.optional(Schema.NullOr(DateInput)),
  input_example: Schema.optional(Schema.NullOr(JsonObject)),
  input_schema: Schema.optional(Schema.NullOr(JsonObject)),
  is_active: Schema.optional(Schema.Boolean)
}

interface Prices {
  readonly min_price_usd?: BigDecimal.BigDecimal | null | undefined
  readonly median_price_usd?: BigDecimal.BigDecimal | null | undefined
  readonly max_price_usd?: BigDecimal.BigDecimal | null | undefined
}

/** A provider nobody can price cannot be held for: at least one price, and min <= median <= max. */
const pricedProvider = (p: Prices) => {
  const prices = [p.min_price_usd, p.median_price_usd, p.max_price_usd].filter((v) => v != null)
  if (prices.length === 0) {
    return { path: ["max_price_usd"], message: "at least one of min_price_usd, median_price_usd, max_price_usd is required" }
  }
  for (let i = 1; i < prices.length; i++) {
    if (BigDecimal.lessThan(prices[i]!, prices[i - 1]!)) {
      return { path: ["max_price_usd"], message: "prices must satisfy min_price_usd <= median_price_usd <= max_price_usd" }
    }
  }
  return undefined
}

/** A provider as the operator API takes it: no credentials (those come from the catalog file only). */
export const ProviderInput = Schema.Struct(providerFields).annotations(strict).pipe(Schema.filter(pricedProvider))
export type ProviderInput = typeof ProviderInput.Type

export const CatalogEntry = Schema.Struct({
  capability: CapabilityInput,
  providers: Schema.Array(ProviderInput).pipe(Schema.maxItems(100))
}).annotations(strict)
export type CatalogEntry = typeof CatalogEntry.Type

/** Header names the gateway sets itself: a credential may not replace them. */
const RESERVED_HEADERS = ["host", "content-type", "content-length", "accept", "user-agent", "x-gateway-run-id", "connection", "transfer-encoding"]

/**
 * A provider's credential in the catalog file: the value of environment variable `env`, read at
 * call time and sent as header `header` (after `scheme` and a space when given), to this
 * provider's `url` only. Only the variable's name is in the file; the value is never stored.
 */
export const ProviderAuth = Schema.Struct({
  header: Schema.String.pipe(
    Schema.pattern(/^[A-Za-z0-9-]{1,64}$/, { message: () => "header: 1 to 64 letters, digits or '-'" }),
    Schema.filter((h) => !RESERVED_HEADERS.includes(h.toLowerCase()), { message: () => "header: the gateway sets this header itself" })
  ),
  env: Schema.String.pipe(Schema.pattern(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, { message: () => "env: an environment variable name" })),
  scheme: Schema.optional(Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9._~+/-]{1,32}$/, { message: () => "scheme: one word, e.g. Bearer" })))
}).annotations(strict)
export type ProviderAuth = typeof ProviderAuth.Type

/** A provider in the catalog file: the operator's fields plus an optional credential. */
export const CatalogFileProvider = Schema.Struct({ ...providerFields, auth: Schema.optional(ProviderAuth) }).annotations(strict).pipe(
  Schema.filter(pricedProvider)
)
export type CatalogFileProvider = typeof CatalogFileProvider.Type

/** The seed file: `{ "capabilities": [{ capability, providers }] }`. */
export const CatalogFile = Schema.Struct({
  capabilities: Schema.Array(Schema.Struct({
    capability: CapabilityInput,
    providers: Schema.Array(CatalogFileProvider).pipe(Schema.maxItems(100))
  }).annotations(strict))
})

export const AdminCapability = Schema.Struct({
  slug: Schema.String,
  name: Schema.String,
  description: Schema.NullOr(Schema.String),
  domains: Schema.Array(Schema.String),
  minted_by: Schema.Literal("seed", "classifier"),
  is_active: Schema.Boolean
})

export const AdminProvider = Schema.Struct({
  uid: Schema.String,
  slug: Schema.String,
  name: Schema.NullOr(Schema.String),
  description: Schema.NullOr(Schema.String),
  url: Schema.NullOr(Schema.String),
  call_method: Schema.String,
  protocol: Schema.String,
  min_price_usd: NullableUsd,
  median_price_usd: NullableUsd,
  max_price_usd: NullableUsd,
  rating: Schema.NullOr(Schema.Number),
  availability: Availability,
  last_synced_at: Schema.NullOr(Schema.Date),
  input_example: Schema.NullOr(Schema.Unknown),
  input_schema: Schema.NullOr(Schema.Unknown),
  is_active: Schema.Boolean
})

export const CatalogUpserted = Schema.Struct({ capability: AdminCapability, providers: Schema.Array(AdminProvider) })
export type CatalogUpserted = typeof CatalogUpserted.Type
