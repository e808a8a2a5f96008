// Capabilities: the paid-provider catalog, policy, search and runs with holds. SKELETON: being implemented.
import { Effect } from "effect"

export class Capabilities extends Effect.Service<Capabilities>()("gateway/Capabilities", {
  effect: Effect.succeed({})
}) {}
