// Webhook fair dispatch: the claim finds each endpoint's due deliveries and counts the ones in
// flight without reading a backlog (one tenant's pile of due rows must not slow everyone's claim).
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // Per endpoint, oldest first: the claim walks the endpoints that have pending rows and takes at
  // most a few due rows from each. Partial: delivered and failed history is never scanned.
  yield* sql`CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (endpoint_id, next_attempt_at)
    WHERE status = 'pending'`
  // The rows under a lease (in flight, or claimed by an instance that died): few at any time, and
  // counting them per endpoint and platform is how the concurrency limits hold across instances.
  yield* sql`CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (endpoint_id, lease_until)
    WHERE lease_until IS NOT NULL`
})
