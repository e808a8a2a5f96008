// The catalog's rows as the service reads them, their prices and the provider sort orders.
import type { PgClient } from "@effect/sql-pg"
import { BigDecimal } from "effect"
import { dec } from "../lib/Money.js"

export interface CapabilityRow {
  readonly id: string
  readonly slug: string
  readonly name: string
  readonly description: string | null
  readonly domains: ReadonlyArray<string>
  readonly minted_by: "seed" | "classifier"
  readonly is_active: boolean
}

export interface ProviderRow {
  readonly id: string
  readonly capability_id: string
  readonly slug: string
  readonly name: string | null
  readonly description: string | null
  readonly url: string | null
  readonly call_method: string
  readonly protocol: string
  readonly min_price_usd: string | null
  readonly median_price_usd: string | null
  readonly max_price_usd: string | null
  readonly rating: string | null
  readonly availability: "healthy" | "unknown" | "down"
  readonly last_synced_at: Date | null
  readonly input_example: unknown
  readonly input_schema: unknown
  readonly is_active: boolean
}

export interface JoinedRow extends ProviderRow {
  readonly capability_slug: string
}

/** The columns of a `ProviderRow`, from `capability_providers p`; built once per service. */
export const providerColumnsOf = (sql: PgClient.PgClient) =>
  sql`p.id, p.capability_id, p.slug, p.name, p.description, p.url, p.call_method, p.protocol,
      p.min_price_usd::text, p.median_price_usd::text, p.max_price_usd::text, p.rating::text, p.availability,
      p.last_synced_at, p.input_example, p.input_schema, p.is_active`

export const uidOf = (providerId: string) => `cap_${providerId}`

export const ZERO = BigDecimal.make(0n, 0)

export const price = (value: string | null) => (value === null ? null : dec(value))

/** What a run reserves and what the ceiling is compared with: the worst observed price. */
export const reservePrice = (p: ProviderRow) => price(p.max_price_usd) ?? price(p.median_price_usd) ?? price(p.min_price_usd)

/** The typical price: cost sorting, `max_cost`, `max_pay` admission, and the unreported-cost default. */
export const quotedPrice = (p: ProviderRow) => price(p.median_price_usd) ?? price(p.min_price_usd) ?? price(p.max_price_usd)

export const rating = (p: ProviderRow) => (p.rating === null ? null : Number(p.rating))

const compareNullableDec = (a: BigDecimal.BigDecimal | null, b: BigDecimal.BigDecimal | null) =>
  a === null ? (b === null ? 0 : 1) : b === null ? -1 : BigDecimal.Order(a, b)

export const byCost = (a: ProviderRow, b: ProviderRow) =>
  compareNullableDec(quotedPrice(a), quotedPrice(b)) || (rating(b) ?? -1) - (rating(a) ?? -1) || a.slug.localeCompare(b.slug)

export const byRating = (a: ProviderRow, b: ProviderRow) =>
  (rating(b) ?? -1) - (rating(a) ?? -1) || compareNullableDec(quotedPrice(a), quotedPrice(b)) || a.slug.localeCompare(b.slug)
