// Webhook endpoints, outbox events and deliveries. SKELETON: being implemented.
import { Effect } from "effect"

export default Effect.void
