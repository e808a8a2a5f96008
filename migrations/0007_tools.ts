// Tool service tables (apps per platform, connections, OAuth state, metering). SKELETON: being implemented.
import { Effect } from "effect"

export default Effect.void
