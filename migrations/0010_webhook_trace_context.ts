// Webhook trace context: the W3C traceparent of the span that enqueued an event, so each delivery
// attempt joins the trace of the request or settlement that caused it. NULL for older events.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // Nullable and without a default: adding it is a catalog-only change (no table rewrite), and
  // the previous version's code, which does not write it, keeps working during a rolling deploy.
  yield* sql`ALTER TABLE webhook_events ADD COLUMN traceparent text`
})
