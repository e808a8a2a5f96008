// Settlements: the writes of served calls (log row, budget debit, platform wallet debit) leave
// the request path. A call's settlement is queued when its answer is complete; one writer fiber
// commits what is queued in groups: the common group by one statement (SettleAtOnce), any other
// by a transaction (SettleInTransaction). With call records (CallRecords) the settlement is on
// record in Postgres before the answer ends, and the commit deletes the record.
// Until it commits, a settlement is "pending": admission adds pending costs to what it reads
// (exact, see `unsettled` and `submitted`), and the API's reads wait for the caller's platform
// (`awaitPlatform`), so a client never sees its own call missing. Shutdown drains the queue.
// Queued settlements are journaled to disk (SettlementJournal) for the next start on the same
// disk: every one without call records, and with them only while the writer is stuck.
import type { SqlError } from "@effect/sql/SqlError"
import { PgClient } from "@effect/sql-pg"
import { BigDecimal, Cause, Chunk, Clock, Duration, Effect, Layer, Option, Queue, Schedule } from "effect"
import { isDatabaseOutage, isDeadlock, isQueryCanceled } from "../lib/SqlErrors.js"
import { shutdownTimeout } from "../lib/StopTimes.js"
import { BudgetLedger } from "./BudgetLedger.js"
import type { Settlement } from "./Settlement.js"
import { settlementFailures, settlementGroups, taggedBy } from "../platform/Metrics.js"
import { PlatformWallet } from "./PlatformWallet.js"
import { atOnceCandidate, installSettleAtOnce, settleAtOnce } from "./SettleAtOnce.js"
import { logRowOf, makeSettleInTransaction } from "./SettleInTransaction.js"
import { insertLogRows } from "./InferenceLogs.js"
import { makeLinger } from "../lib/Linger.js"
import { openSettlementJournal, type Segment } from "./SettlementJournal.js"
import { callRecordsEnabled, callRecordsInPostgres, settlementLingerMs, settlementSynchronousCommit, settlementWaitMs } from "./SettlementSettings.js"

interface Entry {
  readonly settlement: Settlement
  /** Its place in the queue: the writer takes entries in this order (see `writtenThrough`). */
  readonly seq: number
  /** Where it is journaled (null: not journaled: journal off, not needed, or its write failed). */
  segment: Segment | null
}

/** Settlements committed per transaction, at most. */
const GROUP_SIZE = 256
/**
 * How long the writer waits for more settlements before it commits a group. Under load the
 * previous commit's wait gathered a group already (at least LOW_LOAD_GROUP), and a short wait
 * adds what arrives meanwhile; at low load it waits longer (GATEWAY_SETTLEMENT_LINGER, 25 ms),
 * until LOW_LOAD_GROUP settlements are queued, so a group is still a dozen calls, not two or
 * three: a group's statement costs about the same whatever its size. A reader that waits for
 * its settlements ends the wait at once (`hurryWriter`). Under load the long wait would keep
 * settlements in memory long enough to survive garbage collections: low load only.
 */
const LINGER_MS = 5
const LOW_LOAD_GROUP = 16
/** Postgres unreachable: retry a group with backoff capped at 5 s, for up to 15 minutes. */
const OUTAGE_RETRY = Schedule.exponential("200 millis").pipe(Schedule.union(Schedule.spaced("5 seconds")), Schedule.upTo("15 minutes"))
/**
 * A settlement that failed alone for another reason than an outage (a constraint, a trigger, a
 * bug): tried again a few times, then logged as not billed (`recordFailure`).
 */
const FAILURE_RETRY = Schedule.exponential("200 millis").pipe(Schedule.intersect(Schedule.recurs(3)))
/** A deadlock: a writer outside the queue (tool metering, capability runs) took locks in another order. */
const isRetriable = (e: { readonly _tag: string }) => isQueryCanceled(e) || isDeadlock(e)

/** Postgres unreachable, as a failure or (a connection lost mid-transaction) a defect of the rollback. */
const outageIn = (cause: Cause.Cause<unknown>) =>
  Option.exists(Option.orElse(Cause.failureOption(cause), () => Cause.dieOption(cause)), (e) =>
    typeof e === "object" && e !== null && "_tag" in e && (e as { readonly _tag: string })._tag === "SqlError" &&
    isDatabaseOutage(e as SqlError))

const ZERO = BigDecimal.make(0n, 0)
const groupsBy = taggedBy(settlementGroups, "path")
/** What a failed settlement's log row says: the database's error code, never its text (tenants read the logs). */
const failureReason = (cause: Cause.Cause<unknown>): string => {
  const error = Option.getOrUndefined(Option.orElse(Cause.failureOption(cause), () => Cause.dieOption(cause)))
  const code = (error as { readonly cause?: { readonly code?: unknown } } | undefined)?.cause?.code
  return typeof code === "string" ? `database error ${code}` : "internal error"
}
const countGroup = (path: "statement" | "transaction") => Effect.sync(() => groupsBy(path).unsafeUpdate(1, []))

export class Settlements extends Effect.Service<Settlements>()("gateway/Settlements", {
  dependencies: [BudgetLedger.Default, PlatformWallet.Default],
  scoped: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    yield* installSettleAtOnce // after the migrations (the client comes from DatabaseLive), before the writer
    const ledger = yield* BudgetLedger
    const wallet = yield* PlatformWallet
    const drainTimeout = yield* shutdownTimeout
    const lowLoadLingerMs = yield* settlementLingerMs
    const synchronousCommit = yield* settlementSynchronousCommit
    const withRecords = yield* callRecordsEnabled
    const recordsInPostgres = yield* callRecordsInPostgres
    const waitMs = yield* settlementWaitMs
    const queue = yield* Queue.unbounded<Entry>()
    const journal = yield* openSettlementJournal
    /** Pending settlements by platform, in submission order. */
    const pending = new Map<string, Set<Entry>>()
    /** The last sequence number given to an entry, and the last the writer is past (written, or given up). */
    let lastSeq = 0
    let writtenThrough = 0
    /** Opened, and replaced, each time the writer is past a group: what waiters wait for. */
    let progress = Effect.unsafeMakeLatch(false)
    /** The writer's wait for more settlements, cut short by a reader in haste or a full group. */
    const linger = makeLinger()
    /** A reader asked for haste while the writer was not lingering: its next group does not wait. */
    let hurryWanted = false
    const hurryWriter = () => {
      if (!linger.cut()) hurryWanted = true
    }
    /** Told the ids of each group the writer is past (CallRecords, when its records live outside Postgres). */
    let writtenListener: ((ids: ReadonlyArray<string>) => void) | null = null
    const whenWritten = (listener: (ids: ReadonlyArray<string>) => void) => {
      writtenListener = listener
    }
    /** The sequence number of the last settlement the writer took. */
    let taken = 0
    const forget = (entry: Entry) => {
      const set = pending.get(entry.settlement.platformId)
      set?.delete(entry)
      if (set?.size === 0) pending.delete(entry.settlement.platformId)
    }

    /** Platforms whose endpoints want budget.debited (seen by the transaction), until when: they skip the one statement. */
    const debitedWanted = new Map<string, number>()
    const WANTED_MEMORY_MS = 10_000
    const commitInTransaction = makeSettleInTransaction(sql, ledger, wallet, (platformId) =>
      debitedWanted.set(platformId, Date.now() + WANTED_MEMORY_MS), synchronousCommit, recordsInPostgres)

    /** Whether a group may try the one statement first. */
    const atOnceFirst = (settlements: ReadonlyArray<Settlement>, now: number) =>
      settlements.every((s) => atOnceCandidate(s) && !((debitedWanted.get(s.platformId) ?? 0) > now))

    /**
     * A group: by the one statement when it can (SettleAtOnce: the common case, one round trip),
     * else by the transaction (SettleInTransaction).
     */
    const commit = (entries: ReadonlyArray<Entry>) =>
      Effect.suspend(() => {
        const all = entries.map((entry) => entry.settlement)
        const transaction = Effect.zipLeft(commitInTransaction(all), countGroup("transaction"))
        return atOnceFirst(all, Date.now())
          ? Effect.flatMap(settleAtOnce(sql, all, synchronousCommit, recordsInPostgres), (written) => written ? countGroup("statement") : transaction)
          : transaction
      }).pipe(Effect.retry({ while: isRetriable, times: 5 }))

    /**
     * The database went away while committing a group: retry it (the queue waits) until it is
     * back, for up to OUTAGE_RETRY; past that, it is kept in the journal for the next start.
     */
    const commitThroughOutage = (entries: ReadonlyArray<Entry>): Effect.Effect<ReadonlyArray<Entry>, unknown> =>
      Effect.logWarning("settlement postponed: database unavailable").pipe(
        Effect.zipRight(Effect.sync(degrade)),
        Effect.zipRight(commit(entries).pipe(Effect.sandbox, Effect.retry({ schedule: OUTAGE_RETRY, while: outageIn }), Effect.unsandbox)),
        Effect.as([]),
        Effect.catchAllCause((last) =>
          outageIn(last)
            ? Effect.logError(
              journal === null
                ? "settlement failed: database unavailable"
                : "settlement failed: database unavailable; kept in the settlement journal for the next start",
              last
            ).pipe(Effect.as(entries))
            : Effect.failCause(last)
        )
      )

    /**
     * Commits a group (see commitThroughOutage for an outage). A group that fails otherwise is
     * split so that one bad settlement cannot take others with it; one that still fails alone is
     * tried again, then recorded as failed. Returns the entries to keep in the journal.
     */
    const commitGroup = (entries: ReadonlyArray<Entry>): Effect.Effect<ReadonlyArray<Entry>> =>
      commit(entries).pipe(
        Effect.as([]),
        Effect.catchAllCause((cause) =>
          outageIn(cause)
            ? commitThroughOutage(entries)
            : entries.length > 1
            ? Effect.map(Effect.forEach(entries, (entry) => commitGroup([entry])), (kept) => kept.flat())
            : commitAlone(entries[0]!)
        ),
        Effect.catchAllCause((cause) => Effect.logError("settlement failed", cause).pipe(Effect.as([])))
      )

    const commitAlone = (entry: Entry): Effect.Effect<ReadonlyArray<Entry>, unknown> =>
      commit([entry]).pipe(
        Effect.sandbox,
        Effect.retry({ schedule: FAILURE_RETRY, while: (cause) => !outageIn(cause) }),
        Effect.unsandbox,
        Effect.as([]),
        Effect.catchAllCause((last) => outageIn(last) ? commitThroughOutage([entry]) : recordFailure(entry, last))
      )

    /**
     * A settlement that cannot be written is never dropped silently: its call is logged with
     * billing_status `failed` and the reason (nothing was debited), counted by the
     * gateway.settlement.failures metric, and listed for the operator (GET
     * /v1/admin/settlement-failures). If even that row cannot be written it stays in the journal.
     */
    const recordFailure = (entry: Entry, cause: Cause.Cause<unknown>): Effect.Effect<ReadonlyArray<Entry>> => {
      const s = entry.settlement
      const row = { ...logRowOf(s), billing_status: "failed" as const, error_message: `not billed: settlement failed (${failureReason(cause)})` }
      settlementFailures.unsafeUpdate(1, [])
      return Effect.logError("settlement failed after its retries; the call is logged as not billed", cause).pipe(
        Effect.annotateLogs({ settlement_id: s.id, platform_id: s.platformId }),
        Effect.zipRight(sql`${insertLogRows(sql, [row])}`),
        // Not billed, so it holds nothing either; a reservation left behind lapses at its expiry.
        Effect.zipRight(s.reservationId === undefined ? Effect.void : Effect.ignore(sql`DELETE FROM budget_reservations WHERE id = ${s.reservationId}`)),
        Effect.as([]),
        Effect.catchAllCause((again) =>
          Effect.logError("settlement failed and could not be logged; kept in the journal", again).pipe(Effect.as([entry]))
        )
      )
    }

    const writer = Effect.gen(function*() {
      const first = yield* Queue.takeBetween(queue, 1, GROUP_SIZE)
      taken = Chunk.unsafeLast(first).seq
      // A wait gathers what arrives meanwhile: fewer, larger groups (see LINGER_MS). The load is
      // what was taken plus what is already queued behind it.
      const wait = hurryWanted || first.length >= GROUP_SIZE
        ? 0
        : first.length + lastSeq - taken >= LOW_LOAD_GROUP
        ? LINGER_MS
        : lowLoadLingerMs
      hurryWanted = false
      const entries = first.length >= GROUP_SIZE
        ? first
        : Chunk.appendAll(
          first,
          yield* Effect.zipRight(wait === 0 ? Effect.void : linger.wait(wait), Queue.takeUpTo(queue, GROUP_SIZE - first.length))
        )
      taken = Chunk.unsafeLast(entries).seq
      const slow = setTimeout(degrade, waitMs)
      const kept = yield* commitGroup([...entries]).pipe(Effect.withSpan("Settlements.commit", {
        captureStackTrace: false, // as every per-call span: no Error built per group
        attributes: { "settlement.count": entries.length },
        // Each settled call's span, so a trace leads to the group that wrote it and back.
        links: [...entries].flatMap((entry) =>
          Option.toArray(entry.settlement.parent).map((span) => ({ _tag: "SpanLink" as const, span, attributes: {} })))
      }))
      for (const entry of entries) {
        forget(entry)
        if (entry.segment !== null && !kept.includes(entry)) journal?.release(entry.segment)
      }
      if (writtenListener !== null) writtenListener([...entries].flatMap((entry) => kept.includes(entry) ? [] : [entry.settlement.id]))
      clearTimeout(slow)
      degraded = false
      if (journalFailure !== undefined) {
        yield* Effect.logError("settlement journal: write failed", journalFailure)
        journalFailure = undefined
      }
      // Every entry up to the group's last is written (the queue is taken in order): wake the waiters.
      writtenThrough = Chunk.unsafeLast(entries).seq
      wakeWaiters()
    }).pipe(Effect.forever)
    yield* Effect.forkScoped(writer)

    /**
     * The writer is stuck: retrying a group through a database outage, or a group's commit has
     * run past GATEWAY_SETTLEMENT_WAIT. With call records, queued settlements are journaled from
     * then on (the queued ones at once); those waiting for a commit (`settle`) are let go. The
     * writer's next finished group ends it.
     */
    let degraded = false
    const degrade = () => {
      if (degraded) return
      degraded = true
      if (journal !== null) {
        for (const set of pending.values()) for (const entry of set) if (entry.segment === null) journalFailure ??= journalEntry(entry)
      }
      wakeWaiters()
    }
    /** The first journal write that failed since the writer last logged one. */
    let journalFailure: unknown = undefined
    const journalEntry = (entry: Entry): unknown => {
      try {
        entry.segment = journal!.append(entry.settlement)
        return undefined
      } catch (error) {
        return error
      }
    }
    const wakeWaiters = () => {
      const done = progress
      progress = Effect.unsafeMakeLatch(false)
      done.unsafeOpen()
    }

    /** Waits until the entry with sequence number `seq` is committed, unless the writer is stuck (`degraded`). */
    const awaitCommitted = (seq: number): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (writtenThrough >= seq || degraded) return Effect.void
        hurryWriter() // an answer waits: no point gathering more
        return Effect.zipRight(progress.await, awaitCommitted(seq))
      })

    /** Waits until the writer is past the entry with sequence number `seq`. */
    const awaitWritten = (seq: number): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (writtenThrough >= seq) return Effect.void
        hurryWriter() // someone waits: no point gathering more
        return Effect.zipRight(progress.await, awaitWritten(seq))
      })

    const awaitAll = (entries: Iterable<Entry>) =>
      Effect.suspend(() => {
        let last = 0
        for (const entry of entries) last = Math.max(last, entry.seq)
        return awaitWritten(last)
      })

    // Shutdown (after the listeners closed): write everything queued, up to the deadline. A
    // request cut by the listener's deadline settles a moment later, so the queue must stay
    // empty for a short while before the writer stops.
    const everything = () => [...pending.values()].flatMap((set) => [...set])
    const drain: Effect.Effect<void> = Effect.suspend(() =>
      awaitAll(everything()).pipe(
        Effect.zipRight(Effect.sleep("100 millis")),
        Effect.zipRight(Effect.suspend(() => everything().length === 0 ? Effect.void : drain))
      )
    )
    yield* Effect.addFinalizer(() =>
      drain.pipe(
        Effect.timeoutFail({ duration: drainTimeout, onTimeout: () => "timeout" as const }),
        Effect.catchAll(() =>
          Effect.zipRight(
            Effect.sync(degrade), // journaled for the next start on this disk
            Effect.logError(`shutdown: ${everything().length} settlements not written`)
          )
        ),
        Effect.withClock(Clock.make())
      )
    )

    /** Everything ever queued here, by platform (wallet) and end user (budget): see `submitted`. */
    const queuedByPlatform = new Map<string, BigDecimal.BigDecimal>()
    const queuedByUser = new Map<string, BigDecimal.BigDecimal>()
    const add = (totals: Map<string, BigDecimal.BigDecimal>, key: string, amount: BigDecimal.BigDecimal) =>
      totals.set(key, BigDecimal.sum(totals.get(key) ?? ZERO, amount))

    /** Queues a settlement; returns at once. A failed journal write (disk full) is logged, the settlement still queued. */
    const submit = (settlement: Settlement) => Effect.suspend(() => enqueue(settlement).logged)

    /**
     * Queues a settlement and waits until it is committed, or until the writer is found stuck:
     * then it stays queued (CallRecords settles a dead instance's records through it).
     */
    const settle = (settlement: Settlement) =>
      Effect.suspend(() => {
        const { seq, logged } = enqueue(settlement)
        return Effect.zipRight(logged, awaitCommitted(seq))
      })

    /** `journaled`: written to the journal whatever the state (settlements replayed from a stopped instance's). */
    const enqueue = (settlement: Settlement, journaled = false) => {
      add(queuedByPlatform, settlement.platformId, settlement.costUsd)
      if (settlement.endUserId !== null) add(queuedByUser, settlement.endUserId, settlement.costUsd)
      const entry: Entry = { settlement, seq: ++lastSeq, segment: null }
      // With call records, journaled only while the database is stuck (`degraded`): the call is on record.
      const failure = (!withRecords || degraded || journaled) && journal !== null ? journalEntry(entry) : undefined
      const set = pending.get(settlement.platformId) ?? new Set<Entry>()
      set.add(entry)
      pending.set(settlement.platformId, set)
      Queue.unsafeOffer(queue, entry)
      if (entry.seq - taken >= LOW_LOAD_GROUP) linger.cut() // a group's worth is queued
      return { seq: entry.seq, logged: failure === undefined ? Effect.void : Effect.logError("settlement journal: write failed", failure) }
    }

    /** This instance's pending settlements of a platform (they may commit at any moment). */
    const pendingOf = (platformId: string): ReadonlyArray<Settlement> =>
      [...(pending.get(platformId) ?? [])].map((entry) => entry.settlement)

    /**
     * Waits until this instance's pending settlements of a platform (or of one end user) are
     * written, at most `limit` (then reads go ahead: the database may be down).
     */
    const awaitPlatform = (platformId: string, endUserId?: string, limit: Duration.DurationInput = "5 seconds") =>
      Effect.suspend(() => {
        const set = pending.get(platformId)
        if (set === undefined) return Effect.void
        const entries = [...set].filter((entry) => endUserId === undefined || entry.settlement.endUserId === endUserId)
        return entries.length === 0 ? Effect.void : awaitAll(entries).pipe(Effect.timeout(limit), Effect.ignore)
      })

    /** Waits for every pending settlement of this instance (operator reads, tests). */
    const awaitEverything = (limit: Duration.DurationInput = "5 seconds") =>
      Effect.suspend(() =>
        awaitAll(everything()).pipe(Effect.timeout(limit), Effect.ignore)
      )

    /**
     * Running totals of the costs this instance ever queued for a platform's wallet and an end
     * user's budget: two readings bracket what was queued in between (admission's cache).
     */
    const submitted = (platformId: string, endUserId: string | null) => ({
      wallet: queuedByPlatform.get(platformId) ?? ZERO,
      budget: endUserId === null ? ZERO : queuedByUser.get(endUserId) ?? ZERO
    })

    // What crashed instances left: queued again (and so journaled here) before their files go.
    if (journal !== null) {
      const { files, foreign, settlements } = journal.leftovers
      if (settlements.length > 0) yield* Effect.logWarning(`settlement journal: ${settlements.length} settlements of a stopped instance queued again`)
      for (const settlement of settlements) yield* enqueue(settlement, true).logged
      journal.dropLeftovers()
      if (foreign.length > 0) yield* Effect.logWarning(`settlement journal: ${foreign.length} files of another database left alone: ${foreign.join(", ")}`)
      if (files.length > 0) yield* Effect.logInfo(`settlement journal: ${files.length} files of stopped instances read`)
    }

    return { submit, settle, whenWritten, pendingOf, submitted, awaitPlatform, awaitEverything } as const
  })
}) {
  /**
   * Tests: `submit` records each settlement in `recorded` and adds its cost to the running
   * totals (`submitted`), and writes nothing; nothing is ever pending, so waits end at once.
   */
  static readonly test = (recorded: Array<Settlement> = []): Layer.Layer<Settlements> =>
    Layer.sync(Settlements, () => {
      const total = (filter: (s: Settlement) => boolean) =>
        recorded.filter(filter).reduce((sum, s) => BigDecimal.sum(sum, s.costUsd), ZERO)
      return Settlements.make({
        submit: (settlement) => Effect.sync(() => void recorded.push(settlement)),
        settle: (settlement) => Effect.sync(() => void recorded.push(settlement)),
        whenWritten: () => undefined,
        pendingOf: () => [],
        submitted: (platformId, endUserId) => ({
          wallet: total((s) => s.platformId === platformId),
          budget: endUserId === null ? ZERO : total((s) => s.endUserId === endUserId)
        }),
        awaitPlatform: () => Effect.void,
        awaitEverything: () => Effect.void
      })
    })
}

/**
 * The pending costs not yet visible in a snapshot: `committed` are the ids among `pending` that
 * the snapshot already saw (their log rows exist), so nothing is counted twice or missed.
 */
export const unsettled = (
  pending: ReadonlyArray<Settlement>,
  committed: ReadonlySet<string>,
  endUserId: string | null
) => {
  let budget = ZERO
  let wallet = ZERO
  for (const s of pending) {
    if (committed.has(s.id)) continue
    wallet = BigDecimal.sum(wallet, s.costUsd)
    if (endUserId !== null && s.endUserId === endUserId) budget = BigDecimal.sum(budget, s.costUsd)
  }
  return { budget, wallet }
}
