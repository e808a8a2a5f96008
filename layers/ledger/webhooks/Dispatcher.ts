// The dispatcher: leases due deliveries fairly (per instance, per platform and per endpoint, the
// last two counted over every instance's leases) and starts each on its own fiber, woken by
// NOTIFY, by a finished send, or by the poll.
import type { Statement } from "@effect/sql"
import type { PgClient } from "@effect/sql-pg"
import { Config, Effect, FiberSet, Queue, Ref, Stream } from "effect"
import { countConfig, durationMsConfig } from "../../lib/ConfigValues.js"

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

export type DispatchLimits = Config.Config.Success<typeof dispatchLimitsConfig>

/** A claimed delivery with what is needed to send it. */
export interface ClaimedRow {
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

/** The claim (leasing up to `slots` due rows, fairly) over the limits and lease of this instance. */
export const makeClaim = (sql: PgClient.PgClient, limits: DispatchLimits) => {
  const leaseMs = limits.sendTimeoutMs + LEASE_MARGIN_MS

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

  return claim
}

/**
 * Runs the dispatch loop and the wake-up listener in the current scope; closing it waits for the
 * sends in flight.
 */
export const runDispatcher = (
  sql: PgClient.PgClient,
  limits: DispatchLimits,
  claim: (slots: number) => Effect.Effect<ReadonlyArray<ClaimedRow>, unknown>,
  deliver: (row: ClaimedRow) => Effect.Effect<void, unknown>
) =>
  Effect.gen(function*() {
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
  })
