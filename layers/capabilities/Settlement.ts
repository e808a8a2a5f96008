// How a capability call's outcome settles: its final state, what it costs and whether it is charged.
import { BigDecimal } from "effect"
import type { FinalState } from "../../schemas/Capabilities.js"
import type { Policy } from "./Policy.js"
import type { CallOutcome } from "./ProviderCall.js"
import { type JoinedRow, quotedPrice, ZERO } from "./Rows.js"

export interface Settlement {
  readonly state: FinalState
  readonly ok: boolean
  readonly status: number | null
  readonly cost: BigDecimal.BigDecimal
  readonly charge: boolean
  readonly error: string | null
}

/**
 * Maps the call's outcome to a final state:
 *  - 2xx: `billed`, charged (ok is the body's boolean `ok` when present, else true);
 *  - non-2xx: `failed` and charged when charge_failed_calls (default), else `released`;
 *  - no answer (timeout, connection error, refused URL): `released`, nothing charged.
 * A charged cost is the provider's `x-cost-usd` header, else the median price, capped at the hold.
 */
export const settlementOf = (outcome: CallOutcome, provider: JoinedRow, hold: BigDecimal.BigDecimal, policy: Policy): Settlement => {
  if (outcome._tag === "NoAnswer") {
    return { state: "released", ok: false, status: null, cost: ZERO, charge: false, error: outcome.message }
  }
  const cost = BigDecimal.min(outcome.reportedCost ?? quotedPrice(provider) ?? hold, hold)
  const success = outcome.status >= 200 && outcome.status < 300
  if (success) {
    const flag = typeof outcome.body === "object" && outcome.body !== null && "ok" in outcome.body ? outcome.body.ok : undefined
    return { state: "billed", ok: typeof flag === "boolean" ? flag : true, status: outcome.status, cost, charge: true, error: null }
  }
  const error = `provider answered HTTP ${outcome.status}`
  return policy.chargeFailedCalls
    ? { state: "failed", ok: false, status: outcome.status, cost, charge: true, error }
    : { state: "released", ok: false, status: outcome.status, cost: ZERO, charge: false, error }
}
