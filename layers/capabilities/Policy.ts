// A platform's capability policy, each provider's state under it, and the operator's timing of
// capability calls.
import { BigDecimal, Config, Option, Schema } from "effect"
import type { CapabilityProvider, PolicyState } from "../../schemas/Capabilities.js"
import { CapabilityPolicy } from "../../schemas/Platforms.js"
import { durationMsConfig } from "../lib/ConfigValues.js"
import { dec } from "../lib/Money.js"
import { price, type ProviderRow, rating, reservePrice, uidOf } from "./Rows.js"

/** A platform's `settings.capabilities`, with the defaults applied. */
export interface Policy {
  readonly enabled: boolean
  readonly ceiling: BigDecimal.BigDecimal | null
  readonly allowlist: ReadonlyArray<string> | null
  readonly denylist: ReadonlyArray<string>
  readonly chargeFailedCalls: boolean
}

const decodePolicy = Schema.decodeUnknownOption(CapabilityPolicy)

export const policyOf = (raw: unknown): Policy => {
  const p = Option.getOrUndefined(decodePolicy(raw ?? {}))
  return {
    enabled: p?.enabled === true,
    ceiling: p?.max_price_usd == null ? null : dec(p.max_price_usd),
    allowlist: p?.allowlist ?? null,
    denylist: p?.denylist ?? [],
    chargeFailedCalls: p?.charge_failed_calls ?? true
  }
}

/**
 * denylisted > not_allowlisted > above_ceiling > in_policy. A list entry names a provider by
 * its slug, its uid, `capability/provider`, or a whole capability by its slug.
 */
export const policyStateOf = (policy: Policy, capabilitySlug: string, p: ProviderRow): PolicyState => {
  const names = [p.slug, uidOf(p.id), `${capabilitySlug}/${p.slug}`, capabilitySlug]
  if (policy.denylist.some((entry) => names.includes(entry))) return "denylisted"
  if (policy.allowlist !== null && !policy.allowlist.some((entry) => names.includes(entry))) return "not_allowlisted"
  const reserve = reservePrice(p)
  if (reserve === null) return "above_ceiling" // unpriced: nothing could be held for it
  if (policy.ceiling !== null && BigDecimal.greaterThan(reserve, policy.ceiling)) return "above_ceiling"
  return "in_policy"
}

export const toProvider = (policy: Policy, capabilitySlug: string, p: ProviderRow): CapabilityProvider => ({
  uid: uidOf(p.id),
  slug: p.slug,
  name: p.name,
  description: p.description,
  url: p.url,
  min_price_usd: price(p.min_price_usd),
  median_price_usd: price(p.median_price_usd),
  max_price_usd: price(p.max_price_usd),
  rating: rating(p),
  availability: p.availability,
  last_synced_at: p.last_synced_at,
  policy_state: policyStateOf(policy, capabilitySlug, p),
  call_method: p.call_method,
  input_example: p.input_example ?? null,
  input_schema: p.input_schema ?? null
})

/** A capability call's timeout, how long its open hold outlives it, and how often holds are swept. */
export const capabilityTiming = Config.all({
  timeoutMs: durationMsConfig("GATEWAY_CAPABILITY_TIMEOUT", 30_000, 1, "GATEWAY_CAPABILITY_TIMEOUT_MS"),
  // An open hold outlives its call by this much before recovery may release it.
  graceMs: durationMsConfig("GATEWAY_CAPABILITY_HOLD_GRACE", 60_000, 0, "GATEWAY_CAPABILITY_HOLD_GRACE_MS"),
  sweepMs: durationMsConfig("GATEWAY_CAPABILITY_SWEEP", 30_000, 1, "GATEWAY_CAPABILITY_SWEEP_MS")
})
