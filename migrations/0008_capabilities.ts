// Capabilities catalog, runs and budget holds. SKELETON: being implemented.
import { Effect } from "effect"

export default Effect.void
