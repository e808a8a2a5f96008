// WebhookOutbox: budget events written as outbox rows inside the ledger transaction, then
// delivered (Standard Webhooks signature, retried by GATEWAY_WEBHOOK_RETRY_SCHEDULE, W3C
// traceparent of the enqueuing trace) by a dispatcher that several instances may run at once,
// fair across platforms (webhooks/). WebhookEndpoints, the tenant's endpoints, lives in
// webhooks/Endpoints.ts and is re-exported here with the other names importers use.
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer } from "effect"
import { currentTraceparent } from "../lib/CurrentSpan.js"
import { retryScheduleConfig } from "../lib/RetrySchedule.js"
import { allowPrivateUrls } from "../lib/SsrfGuard.js"
import { Crypto } from "../platform/Crypto.js"
import { makeDeliver } from "./webhooks/Delivery.js"
import { dispatchLimitsConfig, makeClaim, runDispatcher, WAKE_CHANNEL } from "./webhooks/Dispatcher.js"
import { type BudgetEventData, type BudgetEventType, buildEnvelope, wantedBy } from "./webhooks/Events.js"

export { BACKLOG_THRESHOLD, dispatchLimitsConfig, WAKE_CHANNEL } from "./webhooks/Dispatcher.js"
export { maxEndpointsConfig, WebhookEndpoints } from "./webhooks/Endpoints.js"
export { type BudgetEventData, type BudgetEventType, buildEnvelope, wantedBy } from "./webhooks/Events.js"
export { sign } from "./webhooks/Signing.js"

export class WebhookOutbox extends Effect.Service<WebhookOutbox>()("gateway/WebhookOutbox", {
  dependencies: [Crypto.Default],
  scoped: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const crypto = yield* Crypto
    const schedule = yield* retryScheduleConfig.pipe(Effect.orDie)
    const limits = yield* dispatchLimitsConfig.pipe(Effect.orDie)
    const allowPrivate = yield* allowPrivateUrls.pipe(Effect.orDie)
    const firstDelayMs = schedule[0] ?? 0

    /** Writes the event (and one delivery per subscribed endpoint) in the caller's transaction. */
    const enqueue = (eventType: BudgetEventType, data: BudgetEventData, createdAt: Date): Effect.Effect<void> =>
      Effect.gen(function*() {
        const envelope = buildEnvelope(eventType, data, createdAt)
        // This enqueue span (a child of the request's or the settlement's): every delivery attempt
        // of the event becomes its child, in that trace, whichever instance sends it.
        const traceparent = yield* currentTraceparent
        // Endpoints without a list get every type except the opt-in, high-volume debits.
        // The event row is written only when some endpoint wants it: most budget.debited events
        // (one per inference call) have no subscriber and cost one cheap read.
        const deliveries = yield* sql`WITH eps AS (
            SELECT ep.id FROM webhook_endpoints ep
            WHERE ep.platform_id = ${data.platform_id} AND ep.is_active
              AND CASE WHEN ep.event_types IS NULL THEN ${eventType} <> 'budget.debited'
                       ELSE ${eventType} = ANY(ep.event_types) END),
          ev AS (
            INSERT INTO webhook_events (event_id, platform_id, event_type, payload, created_at, traceparent)
            SELECT ${envelope.event_id}, ${data.platform_id}, ${eventType}, ${JSON.stringify(envelope)}::jsonb, ${createdAt},
              ${traceparent}
            WHERE EXISTS (SELECT 1 FROM eps)
            ON CONFLICT (event_id) DO NOTHING
            RETURNING id)
          INSERT INTO webhook_deliveries (event_id, endpoint_id, next_attempt_at)
          SELECT ev.id, eps.id, now() + ${firstDelayMs}::double precision * interval '1 millisecond'
          FROM ev CROSS JOIN eps
          ON CONFLICT (event_id, endpoint_id) DO NOTHING
          RETURNING id`
        // Delivered by Postgres at commit, so dispatchers never wake for a rolled-back event. The
        // payload must be non-empty: @effect/sql-pg's listen() drops notifications without one.
        if (deliveries.length > 0) yield* sql`SELECT pg_notify(${WAKE_CHANNEL}, ${eventType})`
      }).pipe(
        Effect.orDie,
        Effect.withSpan("WebhookOutbox.enqueue", { attributes: { "webhook.event_type": eventType } })
      )

    const claim = makeClaim(sql, limits)
    const deliver = makeDeliver({ sql, crypto, schedule, sendTimeoutMs: limits.sendTimeoutMs, allowPrivate })
    yield* runDispatcher(sql, limits, claim, deliver)

    /**
     * Which event types some active endpoint of the platform wants, in one read: grouped
     * settlements enqueue only those (most budget.debited events have no subscriber).
     */
    const subscribedTypes = (platformId: string) =>
      sql<{ readonly event_types: ReadonlyArray<string> | null }>`SELECT event_types FROM webhook_endpoints
        WHERE platform_id = ${platformId} AND is_active`.pipe(
        Effect.map((rows) => wantedBy(rows.map((row) => row.event_types))),
        Effect.orDie
      )

    return { enqueue, subscribedTypes } as const
  })
}) {
  /**
   * Tests: each enqueued event is recorded in `recorded` (nothing is written or sent);
   * `subscribedTypes` answers `wants` (by default every type is wanted, so every event is recorded).
   */
  static readonly test = (
    recorded: Array<RecordedEvent> = [],
    wants: (type: BudgetEventType) => boolean = () => true
  ): Layer.Layer<WebhookOutbox> =>
    Layer.succeed(
      WebhookOutbox,
      WebhookOutbox.make({
        enqueue: (type, data, createdAt) => Effect.sync(() => void recorded.push({ type, data, createdAt })),
        subscribedTypes: () => Effect.succeed(wants)
      })
    )
}

/** An event WebhookOutbox.test recorded. */
export interface RecordedEvent {
  readonly type: BudgetEventType
  readonly data: BudgetEventData
  readonly createdAt: Date
}
