// Kept in the list (databases ran it): settle_at_once is installed at start by layers/ledger/SettleAtOnce.ts.
import { Effect } from "effect"

export default Effect.void
