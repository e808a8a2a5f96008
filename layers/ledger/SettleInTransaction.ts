// The transaction that writes a group of settlements whatever it holds (Settlements uses it when
// the one statement, SettleAtOnce, cannot): one statement writes the log rows and locks the
// group's budgets, one writes every budget's ledger rows and update (a budget whose debits raise
// webhook events, or cross a period boundary, gets statements of its own), one per platform
// wallet, and one deletes the budget reservations the group's calls made. Locks are taken in a
// fixed order: budgets by end user, then wallets by platform.
import type { PgClient } from "@effect/sql-pg"
import { BigDecimal, Effect, Option } from "effect"
import { sqlDec } from "../lib/Money.js"
import { currentPeriodStart } from "../lib/Periods.js"
import type { BudgetLedger, BudgetRow, DebitItem } from "./BudgetLedger.js"
import { ruleCharge } from "./DisplayLedger.js"
import { insertLogRows, type LogRowWithId } from "./InferenceLogs.js"
import type { PlatformWallet } from "./PlatformWallet.js"
import type { Settlement } from "./Settlement.js"
import { type BudgetEventType, wantedBy } from "./WebhookOutbox.js"

const ZERO = BigDecimal.make(0n, 0)

/** Groups in key order: budgets and wallets are always locked in the same order. */
const groupBy = <A>(items: ReadonlyArray<A>, key: (a: A) => string): Array<[string, Array<A>]> => {
  const groups = new Map<string, Array<A>>()
  for (const item of items) {
    const k = key(item)
    const list = groups.get(k)
    if (list === undefined) groups.set(k, [item])
    else list.push(item)
  }
  return [...groups].sort(([a], [b]) => a.localeCompare(b))
}

/** A settlement's log row. */
export const logRowOf = (s: Settlement): LogRowWithId => ({
  ...s.log,
  id: s.id,
  platform_id: s.platformId,
  end_user_id: s.endUserId,
  estimated_cost_usd: sqlDec(s.costUsd),
  billing_status: s.log.billing_status ?? (BigDecimal.greaterThan(s.costUsd, ZERO) ? "billed" : "not_billed"),
  created_at: s.at
})

/** The (platform, end user) pairs whose budgets a group debits, each once. */
const budgetOwners = (settlements: ReadonlyArray<Settlement>) => {
  const owners = new Map<string, { readonly platform_id: string; readonly end_user_id: string }>()
  for (const s of settlements) {
    if (s.endUserId !== null) owners.set(s.endUserId, { platform_id: s.platformId, end_user_id: s.endUserId })
  }
  return [...owners.values()]
}

const traced = (settlement: Settlement) => <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Option.match(settlement.parent, { onNone: () => self, onSome: (span) => Effect.withParentSpan(self, span) })

/** What one settlement adds to a budget: its debit (if billed) and its display charge. */
const itemOf = (settlement: Settlement, row: BudgetRow) => {
  const display = settlement.displaySettings?.enabled === true && row.max_display !== null
    ? ruleCharge(settlement.displaySettings.rules ?? [], { costUsd: settlement.costUsd, inferenceCalls: 1, toolCalls: 0 })
    : ZERO
  return {
    amount: BigDecimal.greaterThan(settlement.costUsd, ZERO) ? settlement.costUsd : null,
    display,
    reason: "inference",
    metadata: BigDecimal.isZero(display) ? settlement.details : { ...settlement.details, display_charged: BigDecimal.format(display) },
    actor: settlement.actor,
    at: settlement.at,
    traced: traced(settlement)
  }
}

/**
 * The group's transaction over these services. `debitedWanted` hears of each platform whose
 * webhook endpoints want budget.debited (the one statement leaves those to the transaction).
 */
export const makeSettleInTransaction = (
  sql: PgClient.PgClient,
  ledger: BudgetLedger,
  wallet: PlatformWallet,
  debitedWanted: (platformId: string) => void,
  synchronousCommit: boolean,
  withRecords: boolean
) => {
  /**
   * The log rows of a group in one statement. Returns the ids that were new (the others were
   * applied before) and, read in the same round trip, which budget events each platform's
   * webhook endpoints want (so the debits need not ask) and the live budgets of the group's
   * end users, locked (FOR UPDATE, in end user order as the debits used to lock them one by
   * one), so the debits need not lock them in a round trip each. The group's platform wallets
   * are locked here too, after the budgets: the usage rollup's trigger locks its rows when this
   * statement ends, and the one statement (SettleAtOnce) locks wallets before that, so both
   * paths take budgets, wallets, rollup rows in that order.
   */
  const insertLogs = (settlements: ReadonlyArray<Settlement>) =>
    sql<{
      readonly fresh: ReadonlyArray<string> | null
      readonly endpoint_types: Record<string, ReadonlyArray<ReadonlyArray<string> | null>> | null
      readonly wallets_locked: string
    } & { readonly [K in keyof BudgetRow]: BudgetRow[K] | null }>`WITH inserted AS (${insertLogRows(sql, settlements.map(logRowOf))}
        RETURNING id, platform_id),
      locked AS (SELECT b.* FROM budgets b
        WHERE (b.platform_id, b.end_user_id) IN (
            SELECT x.platform_id, x.end_user_id FROM jsonb_to_recordset(${JSON.stringify(budgetOwners(settlements))}::jsonb)
              AS x(platform_id uuid, end_user_id uuid))
          AND b.deleted_at IS NULL
        ORDER BY b.end_user_id FOR UPDATE),
      wallets AS (SELECT w.platform_id FROM platform_wallets w
        WHERE w.platform_id IN (SELECT platform_id FROM inserted) AND (SELECT count(*) FROM locked) >= 0
        ORDER BY w.platform_id FOR UPDATE)
        SELECT summary.*, locked.* FROM (SELECT (SELECT jsonb_agg(id::text) FROM inserted) AS fresh,
          (SELECT count(*) FROM wallets) AS wallets_locked,
          (SELECT jsonb_object_agg(p.platform_id::text, (SELECT coalesce(jsonb_agg(ep.event_types), '[]'::jsonb)
              FROM webhook_endpoints ep WHERE ep.platform_id = p.platform_id AND ep.is_active))
            FROM (SELECT DISTINCT platform_id FROM inserted) p) AS endpoint_types) summary
        LEFT JOIN locked ON true`.pipe(
      Effect.map((rows) => ({
        fresh: new Set(rows[0]?.fresh ?? []),
        subscribed: new Map(Object.entries(rows[0]?.endpoint_types ?? {}).map(([platformId, types]) => [platformId, wantedBy(types)])),
        budgets: new Map(rows.flatMap(({ fresh: _fresh, endpoint_types: _types, wallets_locked: _wallets, ...budget }) =>
          budget.id === null ? [] : [[budget.end_user_id!, budget as BudgetRow] as const]))
      }))
    )

  /**
   * One end user's settlements on their live budget (`budget`, locked by insertLogs; none: no
   * live budget); a period boundary among them resets first. Returns the last period's debits,
   * for the group's one statement (debitBudgetsLocked); those before a boundary are written here.
   */
  const debitBudget = Effect.fnUntraced(function*(
    platformId: string,
    endUserId: string,
    budget: BudgetRow | undefined,
    settlements: ReadonlyArray<Settlement>,
    subscribed: ((type: BudgetEventType) => boolean) | undefined
  ) {
    if (budget === undefined) return Option.none()
    const locked = yield* ledger.activeLocked(budget, settlements[0]!.at)
    if (Option.isNone(locked)) return Option.none()
    let row = locked.value
    let run: Array<Settlement> = []
    for (const settlement of settlements) {
      if (currentPeriodStart(row.period, row.period_anchor, settlement.at).getTime() > row.period_start.getTime()) {
        row = yield* ledger.debitManyLocked(row, run.map((s) => itemOf(s, row)), subscribed)
        run = []
        const reset = yield* ledger.lockActive(platformId, endUserId, settlement.at)
        if (Option.isNone(reset)) return Option.none()
        row = reset.value
      }
      run.push(settlement)
    }
    const last = row
    return Option.some({ before: last, items: run.map((s) => itemOf(s, last)) })
  })

  /** One transaction for a group: log rows, then budgets (by end user), then wallets (by platform). */
  return Effect.fnUntraced(function*(all: ReadonlyArray<Settlement>) {
    // The calls' records go with their settlements (CallRecords); the commit's WAL flush is
    // waited for only when asked (settlementSynchronousCommit).
    if (withRecords) {
      yield* sql`WITH recorded AS (
          DELETE FROM call_records WHERE id IN (SELECT jsonb_array_elements_text(${JSON.stringify(all.map((s) => s.id))}::jsonb)::uuid)
        )
        SELECT set_config('synchronous_commit', CASE WHEN ${synchronousCommit} THEN current_setting('synchronous_commit') ELSE 'off' END, true)`
    } else if (!synchronousCommit) {
      yield* sql`SELECT set_config('synchronous_commit', 'off', true)`
    }
    const { budgets, fresh, subscribed } = yield* insertLogs(all)
    for (const [platformId, wanted] of subscribed) {
      if (wanted("budget.debited")) debitedWanted(platformId)
    }
    const applied = all.filter((s) => fresh.has(s.id))
    const batches: Array<{ readonly before: BudgetRow; readonly items: ReadonlyArray<DebitItem> }> = []
    for (const [endUserId, list] of groupBy(applied.filter((s) => s.endUserId !== null), (s) => s.endUserId!)) {
      const platformId = list[0]!.platformId
      const batch = yield* debitBudget(platformId, endUserId, budgets.get(endUserId), list, subscribed.get(platformId))
      if (Option.isSome(batch)) batches.push(batch.value)
    }
    yield* ledger.debitBudgetsLocked(batches, (platformId) => subscribed.get(platformId))
    const billed = applied.filter((s) => BigDecimal.greaterThan(s.costUsd, ZERO))
    for (const [platformId, list] of groupBy(billed, (s) => s.platformId)) {
      yield* wallet.debitMany(platformId, list.map((s) => ({ amount: s.costUsd, metadata: s.details })))
    }
    // The actual cost replaces the reservation in the same commit: the budget never counts both, nor neither.
    const reservations = all.flatMap((s) => s.reservationId === undefined ? [] : [s.reservationId])
    if (reservations.length > 0) {
      yield* sql`DELETE FROM budget_reservations WHERE id IN (SELECT jsonb_array_elements_text(${JSON.stringify(reservations)}::jsonb)::uuid)`
    }
  }, sql.withTransaction)
}
