// WebhookOutbox: budget events written as outbox rows inside the ledger transaction, then
// delivered (Standard Webhooks signature, retried by GATEWAY_WEBHOOK_RETRY_SCHEDULE, W3C
// traceparent of the enqueuing trace) by a dispatcher that several instances may run at once,
// fair across platforms. WebhookEndpoints: the tenant's endpoints, capped per platform.
import { Headers, HttpTraceContext } from "@effect/platform"
import type { Statement } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { BigDecimal, Clock, Config, Effect, FiberSet, Layer, Metric, Option, Queue, Ref, Schema, Stream, type Tracer } from "effect"
import { createHmac, randomBytes } from "node:crypto"
import * as http from "node:http"
import * as https from "node:https"
import { Conflict, NotFound, ValidationError } from "../../schemas/Errors.js"
import {
  API_VERSION,
  DEFAULT_EVENT_TYPES,
  type WebhookDelivery,
  type WebhookEndpoint,
  type WebhookEndpointCreated,
  WebhookEnvelope,
  type WebhookEventType
} from "../../schemas/Webhooks.js"
import { countConfig, durationMsConfig } from "../lib/ConfigValues.js"
import { isUuid } from "../lib/Ids.js"
import { offsetOf, paginate } from "../lib/Pagination.js"
import { nextDelay, retryScheduleConfig } from "../lib/RetrySchedule.js"
import { annotateCurrentSpan, currentTraceparent } from "../lib/CurrentSpan.js"
import { allowPrivateUrls, checkUrl, guardedLookup } from "../lib/SsrfGuard.js"
import { Crypto } from "../platform/Crypto.js"
import { webhookDeliveries } from "../platform/Metrics.js"

export type BudgetEventType =
  | "budget.topped_up"
  | "budget.low_balance"
  | "budget.suspended"
  | "budget.unsuspended"
  | "budget.debited"

/** The `data` of the v1 envelope (spec "Webhooks"). */
export interface BudgetEventData {
  readonly platform_id: string
  readonly end_user_id: string
  readonly budget_id: string
  readonly transaction_id: string
  readonly type: string
  readonly amount_usd: BigDecimal.BigDecimal
  readonly max_usd_after: BigDecimal.BigDecimal
  readonly used_usd_after: BigDecimal.BigDecimal
  readonly remaining_usd_after: BigDecimal.BigDecimal
  readonly reason: string | null
  readonly metadata: Record<string, unknown>
}

/** NOTIFY channel that wakes dispatchers when an enqueue commits. */
export const WAKE_CHANNEL = "gateway_webhooks_wake"
const POLL_MS = 500
/** A claim's lease outlives its send (bounded by the timeout) by this much, so only a crash lets it lapse. */
const LEASE_MARGIN_MS = 20_000
/** Any constant shared by every instance (the migration lock is another): claims take turns. */
const CLAIM_LOCK = 7_213_381_246
/** Up to this many due rows, a claim chooses among all of them; beyond, among each endpoint's share. */
export const BACKLOG_THRESHOLD = 200

/**
 * How much the dispatcher sends at once. The instance bound is per process (sockets, fibers);
 * the platform and endpoint bounds hold across all instances, counted from the leases in
 * Postgres, so one tenant's slow receivers can hold only its own share of the slots.
 */
export const dispatchLimitsConfig = Config.all({
  sendTimeoutMs: durationMsConfig("GATEWAY_WEBHOOK_TIMEOUT", 10_000, 1),
  concurrency: countConfig("GATEWAY_WEBHOOK_CONCURRENCY", 32),
  platformConcurrency: countConfig("GATEWAY_WEBHOOK_PLATFORM_CONCURRENCY", 8),
  endpointConcurrency: countConfig("GATEWAY_WEBHOOK_ENDPOINT_CONCURRENCY", 4)
})

/** The most endpoints one platform may register. */
export const maxEndpointsConfig = countConfig("GATEWAY_WEBHOOK_MAX_ENDPOINTS", 20)

const money = (x: BigDecimal.BigDecimal): number => Number(BigDecimal.format(BigDecimal.normalize(x)))

/** The envelope exactly as the spec shows it; money as JSON numbers. */
export const buildEnvelope = (eventType: BudgetEventType, data: BudgetEventData, createdAt: Date): WebhookEnvelope => ({
  event_type: eventType,
  event_id: `${data.transaction_id}:${eventType}`,
  api_version: API_VERSION,
  created_at: createdAt.toISOString(),
  data: {
    platform_id: data.platform_id,
    end_user_id: data.end_user_id,
    budget_id: data.budget_id,
    transaction_id: data.transaction_id,
    type: data.type,
    amount_usd: money(data.amount_usd),
    max_usd_after: money(data.max_usd_after),
    used_usd_after: money(data.used_usd_after),
    remaining_usd_after: money(data.remaining_usd_after),
    reason: data.reason,
    metadata: data.metadata
  }
})

/** Standard Webhooks: `v1,` + base64 HMAC-SHA256 of `id.timestamp.body`, keyed by the secret's base64 part. */
export const sign = (secret: string, webhookId: string, timestamp: number, body: string): string => {
  const key = Buffer.from(secret.slice(secret.indexOf("_") + 1), "base64")
  return `v1,${createHmac("sha256", key).update(`${webhookId}.${timestamp}.${body}`).digest("base64")}`
}

const newSecret = (): string => `whsec_${randomBytes(24).toString("base64")}`

/** The stored traceparent as a parent span; none when absent or malformed (the delivery starts a trace). */
const parentFrom = (traceparent: string | null): Option.Option<Tracer.ExternalSpan> =>
  traceparent === null ? Option.none() : HttpTraceContext.w3c(Headers.fromInput({ traceparent }))

/**
 * Whether some endpoint wants an event type, from the `event_types` of a platform's active
 * endpoints: a list, or null for every type except the opt-in, high-volume budget.debited.
 */
export const wantedBy = (endpointTypes: ReadonlyArray<ReadonlyArray<string> | null>) => (type: BudgetEventType): boolean =>
  endpointTypes.some((types) => types === null ? type !== "budget.debited" : types.includes(type))

// --- rows ---------------------------------------------------------------------------------

interface EndpointRow {
  readonly id: string
  readonly platform_id: string
  readonly url: string
  readonly event_types: ReadonlyArray<WebhookEventType> | null
  readonly is_active: boolean
  readonly created_at: Date
}
const ENDPOINT_COLUMNS = "id, platform_id, url, event_types, is_active, created_at"

const toEndpoint = (row: EndpointRow): WebhookEndpoint => ({
  id: row.id,
  platform_id: row.platform_id,
  url: row.url,
  event_types: row.event_types ?? DEFAULT_EVENT_TYPES,
  is_active: row.is_active,
  created_at: row.created_at
})

interface DeliveryRow {
  readonly id: string
  readonly event_id: string
  readonly event_type: string
  readonly status: "pending" | "delivered" | "failed"
  readonly last_http_status: number | null
  readonly attempt: number
  readonly next_attempt_at: Date | null
  readonly last_error: string | null
  readonly created_at: Date
  readonly updated_at: Date
}

const toDelivery = (row: DeliveryRow): WebhookDelivery => ({
  id: row.id,
  event_id: row.event_id,
  event_type: row.event_type,
  status: row.status,
  http_status: row.last_http_status,
  attempt: row.attempt,
  next_attempt_at: row.next_attempt_at,
  last_error: row.last_error,
  created_at: row.created_at,
  updated_at: row.updated_at
})

/** A claimed delivery with what is needed to send it. */
interface ClaimedRow {
  readonly id: string
  readonly attempt: number
  readonly webhook_id: string
  readonly event_type: string
  /** The enqueuing span's W3C context; NULL for events written before migration 0010. */
  readonly traceparent: string | null
  readonly payload: unknown
  readonly url: string
  readonly secret_encrypted: string
  readonly endpoint_active: boolean
}

interface Outcome {
  readonly httpStatus: number | null
  readonly error: string | null
}

const endpointNotFound = new NotFound({ code: "not_found", message: "No such webhook endpoint" })

// --- HTTP -----------------------------------------------------------------------------------

/**
 * One POST with node:http(s). The SSRF-guarded `lookup` re-checks addresses at connect time; no
 * redirects are followed (a 3xx is a failed attempt). The timeout lives in Node, not in the
 * fiber, so an attempt in flight at shutdown still ends within `timeoutMs`; it covers the whole
 * exchange up to the response head (a receiver that accepts and never answers is cut).
 */
const post = (url: URL, headers: Record<string, string>, body: string, allowPrivate: boolean, timeoutMs: number) =>
  Effect.async<number, Error>((resume) => {
    const options: http.RequestOptions = {
      method: "POST",
      headers: { ...headers, "content-length": String(Buffer.byteLength(body)) }
    }
    if (!allowPrivate) options.lookup = guardedLookup
    const request = (url.protocol === "https:" ? https : http).request(url, options, (response) => {
      clearTimeout(timer)
      response.resume() // the body is ignored; drain it so the socket can be reused
      resume(Effect.succeed(response.statusCode ?? 0))
    })
    const timer = setTimeout(() => request.destroy(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs)
    request.on("error", (error) => {
      clearTimeout(timer)
      resume(Effect.fail(error))
    })
    request.end(body)
  })

// --- the service ------------------------------------------------------------------------------

export class WebhookOutbox extends Effect.Service<WebhookOutbox>()("gateway/WebhookOutbox", {
  scoped: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const crypto = yield* Crypto
    const schedule = yield* retryScheduleConfig.pipe(Effect.orDie)
    const limits = yield* dispatchLimitsConfig.pipe(Effect.orDie)
    const leaseMs = limits.sendTimeoutMs + LEASE_MARGIN_MS
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

    // --- dispatcher ---------------------------------------------------------------------------

    /**
     * The rows a claim chooses from when nothing is backed up: every due row, oldest first
     * (there are at most BACKLOG_THRESHOLD of them, so this is complete, and cheap).
     */
    const oldestDue = sql`SELECT d.id, d.next_attempt_at, d.endpoint_id, ep.platform_id
      FROM webhook_deliveries d JOIN webhook_endpoints ep ON ep.id = d.endpoint_id
      WHERE d.status = 'pending' AND d.next_attempt_at <= now() AND (d.lease_until IS NULL OR d.lease_until < now())
      ORDER BY d.next_attempt_at LIMIT ${BACKLOG_THRESHOLD}::int`

    /**
     * The rows to choose from when due rows are backed up (a tenant's receivers hang, or it makes
     * events faster than they go): each endpoint with pending rows, found by a skip scan of the
     * pending index, gives its oldest due rows up to its free share. A backlog, however large,
     * is never read whole, and it cannot hide other endpoints' rows behind it.
     */
    const shareOfEachEndpoint = sql`WITH RECURSIVE pending_endpoints (endpoint_id) AS (
          (SELECT endpoint_id FROM webhook_deliveries WHERE status = 'pending' ORDER BY endpoint_id LIMIT 1)
          UNION ALL
          SELECT (SELECT d.endpoint_id FROM webhook_deliveries d
                  WHERE d.status = 'pending' AND d.endpoint_id > p.endpoint_id ORDER BY d.endpoint_id LIMIT 1)
          FROM pending_endpoints p WHERE p.endpoint_id IS NOT NULL)
      SELECT due.id, due.next_attempt_at, pe.endpoint_id, ep.platform_id
      FROM pending_endpoints pe
      JOIN webhook_endpoints ep ON ep.id = pe.endpoint_id
      LEFT JOIN in_flight f ON f.endpoint_id = pe.endpoint_id
      CROSS JOIN LATERAL (
        SELECT d.id, d.next_attempt_at FROM webhook_deliveries d
        WHERE d.endpoint_id = pe.endpoint_id AND d.status = 'pending' AND d.next_attempt_at <= now()
          AND (d.lease_until IS NULL OR d.lease_until < now())
        ORDER BY d.next_attempt_at
        LIMIT greatest(${limits.endpointConcurrency}::int - coalesce(f.n, 0), 0)) due`

    /**
     * Leases up to `slots` of the candidates, fairly: at most `endpointConcurrency` in flight per
     * endpoint and `platformConcurrency` per platform, counted over every instance's leases, and
     * each platform's oldest row before any platform's second. SKIP LOCKED passes over rows that
     * a finishing attempt or an endpoint deletion holds.
     */
    const claimStatement = (slots: number, candidates: Statement.Statement<unknown>) =>
      sql<ClaimedRow>`WITH in_flight AS (
          SELECT endpoint_id, count(*)::int AS n FROM webhook_deliveries
          WHERE lease_until IS NOT NULL AND lease_until > now() AND status = 'pending'
          GROUP BY endpoint_id),
        platform_in_flight AS (
          SELECT ep.platform_id, sum(f.n)::int AS n FROM in_flight f JOIN webhook_endpoints ep ON ep.id = f.endpoint_id
          GROUP BY ep.platform_id),
        candidates AS (${candidates}),
        within_endpoint AS (
          SELECT c.id, c.next_attempt_at, c.platform_id FROM (
              SELECT c.*, row_number() OVER (PARTITION BY c.endpoint_id ORDER BY c.next_attempt_at, c.id) AS endpoint_rank
              FROM candidates c) c
            LEFT JOIN in_flight f ON f.endpoint_id = c.endpoint_id
          WHERE c.endpoint_rank + coalesce(f.n, 0) <= ${limits.endpointConcurrency}::int),
        ranked AS (
          SELECT c.id, c.next_attempt_at, c.platform_id,
            row_number() OVER (PARTITION BY c.platform_id ORDER BY c.next_attempt_at, c.id) AS platform_rank
          FROM within_endpoint c),
        picked AS (
          SELECT r.id FROM ranked r LEFT JOIN platform_in_flight pf ON pf.platform_id = r.platform_id
          WHERE r.platform_rank + coalesce(pf.n, 0) <= ${limits.platformConcurrency}::int
          ORDER BY r.platform_rank, r.next_attempt_at
          LIMIT ${slots}::int),
        claimed AS (
          UPDATE webhook_deliveries SET lease_until = now() + ${leaseMs}::double precision * interval '1 millisecond'
          WHERE id IN (SELECT id FROM webhook_deliveries WHERE id IN (SELECT id FROM picked) FOR UPDATE SKIP LOCKED)
            AND status = 'pending' AND (lease_until IS NULL OR lease_until < now())
          RETURNING id, attempt, event_id, endpoint_id)
        SELECT c.id, c.attempt, e.event_id AS webhook_id, e.event_type, e.traceparent, e.payload, ep.url,
          ep.secret_encrypted, ep.is_active AS endpoint_active
        FROM claimed c
        JOIN webhook_events e ON e.id = c.event_id
        JOIN webhook_endpoints ep ON ep.id = c.endpoint_id`

    /**
     * Claims take turns across instances under an advisory lock: in READ COMMITTED the claim
     * statement's snapshot is taken with the lock held, so it sees the leases of the claim before.
     * The same statement counts the due rows, up to one more than the cheap candidate list holds
     * (a snapshot from before the lock is good enough to choose the list, or to see there is
     * nothing to do). No lock is held while sending.
     */
    const lockAndCountDue = sql<{ readonly due: number }>`SELECT pg_advisory_xact_lock(${
      sql.literal(String(CLAIM_LOCK))
    }), (SELECT count(*)::int FROM (
        SELECT 1 FROM webhook_deliveries
        WHERE status = 'pending' AND next_attempt_at <= now() AND (lease_until IS NULL OR lease_until < now())
        LIMIT ${BACKLOG_THRESHOLD + 1}::int) due) AS due`

    const claim = (slots: number) =>
      Effect.gen(function*() {
        const [counted] = yield* lockAndCountDue
        const due = counted?.due ?? 0
        if (due === 0) return []
        return yield* claimStatement(slots, due > BACKLOG_THRESHOLD ? shareOfEachEndpoint : oldestDue)
      }).pipe(sql.withTransaction)

    const encodeEnvelope = Schema.decodeUnknown(WebhookEnvelope)

    const send = (row: ClaimedRow): Effect.Effect<Outcome> =>
      Effect.gen(function*() {
        if (!row.endpoint_active) return { httpStatus: null, error: "endpoint is inactive" }
        // The SSRF check runs again on every attempt: DNS may have changed since registration.
        const url = yield* checkUrl(row.url, allowPrivate)
        const secret = yield* Effect.try(() => crypto.decrypt(row.secret_encrypted)).pipe(
          Effect.mapError(() => new Error("the endpoint's signing secret cannot be decrypted"))
        )
        // Re-decode the stored JSON so the body keeps the spec's field order (jsonb does not).
        const body = JSON.stringify(yield* encodeEnvelope(row.payload))
        const timestamp = Math.floor((yield* Clock.currentTimeMillis) / 1000)
        // The delivery span is the receiver's parent. Not signed: Standard Webhooks signs only
        // id, timestamp and body, and a receiver must not trust trace context for anything.
        const traceparent = yield* currentTraceparent
        const status = yield* post(url, {
          "content-type": "application/json",
          "user-agent": "model-gateway-webhooks/1",
          "webhook-id": row.webhook_id,
          "webhook-timestamp": String(timestamp),
          "webhook-signature": sign(secret, row.webhook_id, timestamp, body),
          ...(traceparent === null ? {} : { traceparent })
        }, body, allowPrivate, limits.sendTimeoutMs)
        const ok = status >= 200 && status < 300
        return { httpStatus: status, error: ok ? null : `HTTP ${status}` }
      }).pipe(
        Effect.catchAll((e): Effect.Effect<Outcome> => Effect.succeed({ httpStatus: null, error: e.message }))
      )

    /**
     * Records the attempt and moves the delivery on, in one statement. `attempt = claimed attempt`
     * makes a late finisher (whose lease expired and was re-claimed) a no-op.
     */
    const complete = (row: ClaimedRow, outcome: Outcome) => {
      const made = row.attempt + 1
      const delivered = outcome.error === null
      const delay = delivered ? undefined : nextDelay(schedule, made)
      const status = delivered ? "delivered" : delay === undefined ? "failed" : "pending"
      const next = delay === undefined ? sql`NULL` : sql`now() + ${delay}::double precision * interval '1 millisecond'`
      const outcomeTag = status === "pending" ? "retry" : status
      return Metric.increment(Metric.tagged(webhookDeliveries, "outcome", outcomeTag)).pipe(Effect.zipRight(sql`WITH upd AS (
          UPDATE webhook_deliveries SET status = ${status}, attempt = ${made}, next_attempt_at = ${next},
            lease_until = NULL, last_http_status = ${outcome.httpStatus}, last_error = ${outcome.error}, updated_at = now()
          WHERE id = ${row.id} AND attempt = ${row.attempt} AND status = 'pending'
          RETURNING id)
        INSERT INTO webhook_delivery_attempts (delivery_id, attempt, http_status, error)
        SELECT id, ${made}, ${outcome.httpStatus}, ${outcome.error} FROM upd`), Effect.as(outcomeTag))
    }

    /**
     * One attempt (send and record) in a `WebhookOutbox.deliver` span whose parent is the enqueue
     * span stored with the event. Attributes name the delivery, never the URL (it may carry a
     * token of the tenant's) nor the secret. Uninterruptible so shutdown finishes (and records)
     * attempts in flight; Node's timeout bounds it.
     */
    const deliver = (row: ClaimedRow) =>
      Effect.gen(function*() {
        const outcome = yield* send(row)
        if (outcome.httpStatus !== null) yield* annotateCurrentSpan({ "http.response.status_code": outcome.httpStatus })
        yield* annotateCurrentSpan({ "webhook.outcome": yield* complete(row, outcome) })
      }).pipe(
        Effect.withSpan("WebhookOutbox.deliver", {
          kind: "client",
          attributes: {
            "webhook.delivery_id": row.id,
            "webhook.event_id": row.webhook_id,
            "webhook.event_type": row.event_type,
            "webhook.attempt": row.attempt + 1
          },
          ...Option.match(parentFrom(row.traceparent), { onNone: () => ({ root: true }), onSome: (parent) => ({ parent }) })
        }),
        Effect.uninterruptible
      )

    // Sends run on their own fibers, each ending within the send timeout: nothing waits for a
    // batch. Closing the layer waits for the ones in flight (each is uninterruptible).
    const sends = yield* FiberSet.make<void, never>()
    const inFlight = yield* Ref.make(0)
    const wake = yield* Queue.sliding<void>(1)

    const start = (row: ClaimedRow) =>
      deliver(row).pipe(
        Effect.catchAllCause((cause) =>
          Effect.logWarning("webhook attempt not recorded; it is sent again once its lease lapses", cause)
        ),
        // A freed slot may let a row of this endpoint or platform go: claim again at once.
        Effect.ensuring(Ref.update(inFlight, (n) => n - 1).pipe(Effect.zipRight(Queue.offer(wake, undefined)))),
        FiberSet.run(sends)
      )

    /**
     * Leases as many rows as there are free slots and starts each. Uninterruptible, so a claimed
     * row is always sent: at shutdown the loop stops after this, not between claim and start.
     */
    const dispatch = Effect.gen(function*() {
      const free = limits.concurrency - (yield* Ref.get(inFlight))
      if (free <= 0) return
      // Untraced: an idle poll every 500 ms would otherwise be a root trace of its own each time.
      // Each claimed row is traced by its delivery span, in the trace that enqueued it.
      const rows = yield* Effect.withTracerEnabled(claim(free), false)
      yield* Ref.update(inFlight, (n) => n + rows.length)
      yield* Effect.forEach(rows, start, { discard: true })
    }).pipe(Effect.uninterruptible)

    // Resubscribe after an error or an ended stream; the poll below covers anything missed meanwhile.
    yield* sql.listen(WAKE_CHANNEL).pipe(
      Stream.runForEach(() => Queue.offer(wake, undefined)),
      Effect.catchAllCause((cause) => Effect.logDebug("webhook wake-up listener restarting", cause)),
      Effect.zipRight(Effect.sleep("1 second")),
      Effect.forever,
      Effect.forkScoped
    )

    // After a claim every row that could go has gone (or the slots are full): the next chance is
    // a NOTIFY (an enqueue committed), a send finishing, or the poll (retries falling due, other
    // instances' sends finishing), whichever comes first.
    const loop: Effect.Effect<never> = Effect.gen(function*() {
      yield* dispatch.pipe(Effect.catchAllCause((cause) => Effect.logWarning("webhook claim failed", cause)))
      yield* Effect.raceFirst(Queue.take(wake), Effect.sleep(`${POLL_MS} millis`))
    }).pipe(Effect.forever)
    yield* Effect.forkScoped(loop)

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

/**
 * The tenant's endpoints and their deliveries (the /webhook-endpoints routes). A separate
 * service so ledger code and its test spies only ever see `enqueue`.
 */
export class WebhookEndpoints extends Effect.Service<WebhookEndpoints>()("gateway/WebhookEndpoints", {
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const crypto = yield* Crypto
    const allowPrivate = yield* allowPrivateUrls.pipe(Effect.orDie)

    const maxEndpoints = yield* maxEndpointsConfig.pipe(Effect.orDie)

    const endpointLimitReached = new Conflict({
      code: "conflict",
      message: `This platform already has the most webhook endpoints allowed (${maxEndpoints}); delete one before registering another`
    })

    /**
     * Counts and inserts under a lock of the platform row, so two registrations at the limit take
     * turns and only one passes. NO KEY UPDATE: rows that merely reference the platform (logs,
     * ledger entries) take KEY SHARE and are not held up.
     */
    const insertWithinLimit = (platformId: string, url: string, secret: string, eventTypes: ReadonlyArray<WebhookEventType> | undefined) =>
      Effect.gen(function*() {
        yield* sql`SELECT 1 FROM platforms WHERE id = ${platformId} FOR NO KEY UPDATE`
        const [counted] = yield* sql<{ total: number }>`SELECT count(*)::int AS total FROM webhook_endpoints
          WHERE platform_id = ${platformId}`
        if (counted!.total >= maxEndpoints) return yield* endpointLimitReached
        const [row] = yield* sql<EndpointRow>`INSERT INTO webhook_endpoints (platform_id, url, secret_encrypted, event_types)
          VALUES (${platformId}, ${url}, ${crypto.encrypt(secret)},
            ${eventTypes === undefined ? null : [...eventTypes]}::text[])
          RETURNING ${sql.literal(ENDPOINT_COLUMNS)}`
        return row!
      }).pipe(sql.withTransaction, Effect.catchTag("SqlError", Effect.die))

    const createEndpoint = (
      platformId: string,
      input: { readonly url: string; readonly event_types?: ReadonlyArray<WebhookEventType> | undefined }
    ) =>
      Effect.gen(function*() {
        // The URL's DNS check runs before the lock: nothing slow is done while holding it.
        yield* checkUrl(input.url, allowPrivate).pipe(
          Effect.mapError((e) => new ValidationError({ code: "validation_error", param: "url", message: e.message }))
        )
        const secret = newSecret()
        const row = yield* insertWithinLimit(platformId, input.url, secret, input.event_types)
        const created: WebhookEndpointCreated = { ...toEndpoint(row), secret }
        return created
      }).pipe(Effect.withSpan("WebhookOutbox.createEndpoint"))

    const listEndpoints = (platformId: string, params: { readonly page: number; readonly limit: number }) =>
      paginate(
        params,
        sql<{ total: number }>`SELECT count(*)::int AS total FROM webhook_endpoints WHERE platform_id = ${platformId}`,
        sql<EndpointRow>`SELECT ${sql.literal(ENDPOINT_COLUMNS)} FROM webhook_endpoints
          WHERE platform_id = ${platformId}
          ORDER BY created_at, id LIMIT ${params.limit} OFFSET ${offsetOf(params.page, params.limit)}`.pipe(
          Effect.map((rows) => rows.map(toEndpoint))
        )
      ).pipe(Effect.orDie)

    const findEndpoint = (platformId: string, endpointId: string) =>
      Effect.gen(function*() {
        if (!isUuid(endpointId)) return yield* endpointNotFound
        const rows = yield* sql<EndpointRow>`SELECT ${sql.literal(ENDPOINT_COLUMNS)} FROM webhook_endpoints
          WHERE id = ${endpointId} AND platform_id = ${platformId}`.pipe(Effect.orDie)
        return yield* Option.match(Option.fromNullable(rows[0]), {
          onNone: () => Effect.fail(endpointNotFound),
          onSome: Effect.succeed
        })
      })

    const getEndpoint = (platformId: string, endpointId: string) =>
      findEndpoint(platformId, endpointId).pipe(Effect.map(toEndpoint))

    /** Hard delete: its deliveries (pending ones included) and attempts go with it. */
    const deleteEndpoint = (platformId: string, endpointId: string) =>
      Effect.gen(function*() {
        if (!isUuid(endpointId)) return yield* endpointNotFound
        const rows = yield* sql`DELETE FROM webhook_endpoints WHERE id = ${endpointId} AND platform_id = ${platformId}
          RETURNING id`.pipe(Effect.orDie)
        if (rows.length === 0) return yield* endpointNotFound
      })

    const listDeliveries = (
      platformId: string,
      endpointId: string,
      params: { readonly page: number; readonly limit: number }
    ) =>
      Effect.gen(function*() {
        yield* findEndpoint(platformId, endpointId)
        return yield* paginate(
          params,
          sql<{ total: number }>`SELECT count(*)::int AS total FROM webhook_deliveries WHERE endpoint_id = ${endpointId}`,
          sql<DeliveryRow>`SELECT d.id, e.event_id, e.event_type, d.status, d.last_http_status, d.attempt,
              d.next_attempt_at, d.last_error, d.created_at, d.updated_at
            FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
            WHERE d.endpoint_id = ${endpointId}
            ORDER BY d.created_at DESC, d.id DESC
            LIMIT ${params.limit} OFFSET ${offsetOf(params.page, params.limit)}`.pipe(
            Effect.map((rows) => rows.map(toDelivery))
          )
        ).pipe(Effect.orDie)
      })

    return { createEndpoint, listEndpoints, getEndpoint, deleteEndpoint, listDeliveries } as const
  })
}) {}
