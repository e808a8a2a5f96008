// BudgetLedger: the exact USD ledger of each end user. Every mutation locks the budget row,
// applies a due period reset first (lazily, no scheduler), writes exactly one ledger row per
// change and its webhook outbox rows, all in one transaction.
import { PgClient } from "@effect/sql-pg"
import { BigDecimal, Clock, Effect, Option } from "effect"
import type { CreateBudget, LedgerAmount, UpdateBudget } from "../../schemas/Budgets.js"
import { Conflict, ValidationError } from "../../schemas/Errors.js"
import { isUuid } from "../lib/Ids.js"
import { dec, sqlDec } from "../lib/Money.js"
import { isUniqueViolation } from "../lib/SqlErrors.js"
import { type BackfillParams, backfillPage } from "./BackfillPage.js"
import { crossesLowBalance, type DebitItem, type DebitPlan, eventsOf, ledgerRowsOf, planDebits } from "./budget/DebitPlan.js"
import { list as listBudgets } from "./budget/Listing.js"
import { insertDebits as insertDebitRows, insertTransaction as insertTransactionRow } from "./budget/LedgerSql.js"
import { resetIfDue as resetPeriodIfDue } from "./budget/PeriodReset.js"
import {
  type Actor,
  type BudgetRow,
  type LedgerChange,
  type NewBudget,
  noBudget,
  noEndUser,
  remaining,
  toTransaction,
  type TransactionRow
} from "./budget/Rows.js"
import { type BudgetEventType, WebhookOutbox } from "./WebhookOutbox.js"

export type { DebitItem } from "./budget/DebitPlan.js"
export {
  type Actor,
  actorOf,
  type BudgetRow,
  type LedgerChange,
  type NewBudget,
  SYSTEM,
  toBudget,
  toTransaction
} from "./budget/Rows.js"

export class BudgetLedger extends Effect.Service<BudgetLedger>()("gateway/BudgetLedger", {
  dependencies: [WebhookOutbox.Default],
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const outbox = yield* WebhookOutbox

    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    const insertTransaction = (before: BudgetRow, after: BudgetRow, input: Parameters<typeof insertTransactionRow>[3]) =>
      insertTransactionRow(sql, before, after, input)

    const emit = (type: BudgetEventType, change: LedgerChange) =>
      outbox.enqueue(type, {
        platform_id: change.budget.platform_id,
        end_user_id: change.budget.end_user_id,
        budget_id: change.budget.id,
        transaction_id: change.transaction.id,
        type: change.transaction.type,
        amount_usd: dec(change.transaction.amount_usd),
        max_usd_after: dec(change.budget.max_usd),
        used_usd_after: dec(change.budget.used_usd),
        remaining_usd_after: remaining(change.budget),
        reason: change.transaction.reason,
        metadata: change.transaction.metadata
      }, change.transaction.created_at)

    /** The end user must belong to the platform: another tenant's user is "not found". */
    const requireEndUser = (platformId: string, endUserId: string) =>
      Effect.gen(function*() {
        if (!isUuid(endUserId)) return yield* noEndUser
        const rows = yield* sql`SELECT 1 FROM end_users WHERE id = ${endUserId} AND platform_id = ${platformId}`
        if (rows.length === 0) return yield* noEndUser
      })

    /**
     * Locks the live budget and applies a due period reset first (daily: 24 h from
     * period_start; monthly: calendar months from the anchor), writing its adjustment row.
     */
    const lockCurrent = (platformId: string, endUserId: string, at: Date) =>
      Effect.gen(function*() {
        const [row] = isUuid(endUserId)
          ? yield* sql<BudgetRow>`SELECT * FROM budgets
              WHERE end_user_id = ${endUserId} AND platform_id = ${platformId} AND deleted_at IS NULL FOR UPDATE`
          : []
        if (row === undefined) {
          // Tell "no such user" from "no budget" only on the way out.
          yield* requireEndUser(platformId, endUserId)
          return yield* noBudget
        }
        return yield* resetIfDue(row, at)
      })

    /** Settlements: the live budget when it is active, locked and reset; none otherwise. */
    const lockActive = (platformId: string, endUserId: string, at: Date) =>
      lockCurrent(platformId, endUserId, at).pipe(
        Effect.map((row) => row.is_active ? Option.some(row) : Option.none<BudgetRow>()),
        Effect.catchTag("NotFound", () => Effect.succeed(Option.none<BudgetRow>()))
      )

    /** As lockActive, for a live budget row the caller locked already (grouped settlements). */
    const activeLocked = (row: BudgetRow, at: Date) =>
      resetIfDue(row, at).pipe(Effect.map((reset) => reset.is_active ? Option.some(reset) : Option.none<BudgetRow>()))

    const resetIfDue = (row: BudgetRow, at: Date) => resetPeriodIfDue(sql, row, at)

    /** Creates a budget and its opening row; runs inside the caller's transaction if any. */
    const open = (input: NewBudget, actor: Actor) =>
      Effect.gen(function*() {
        const at = yield* now
        const [row] = yield* sql<BudgetRow>`INSERT INTO budgets
            (platform_id, end_user_id, max_usd, period, period_start, period_anchor, auto_replenish,
             replenish_amount, low_balance_threshold, created_at, updated_at)
          VALUES (${input.platformId}, ${input.endUserId}, ${sqlDec(input.maxUsd)}, ${input.period}, ${at}, ${at},
            ${input.autoReplenish ?? false},
            ${input.replenishAmount === undefined ? null : sqlDec(input.replenishAmount)},
            ${input.lowBalanceThreshold === undefined ? null : sqlDec(input.lowBalanceThreshold)}, ${at}, ${at})
          RETURNING *`
        const zero = { ...row!, max_usd: "0", used_usd: "0" }
        yield* insertTransaction(zero, row!, {
          type: "opening",
          amount: row!.max_usd,
          reason: input.reason ?? null,
          metadata: input.metadata ?? {},
          actor,
          at
        })
        return row!
      })

    const create = (platformId: string, endUserId: string, input: CreateBudget, actor: Actor) =>
      Effect.gen(function*() {
        if (input.auto_replenish && input.replenish_amount === undefined) {
          return yield* new ValidationError({
            code: "validation_error",
            param: "replenish_amount",
            message: "replenish_amount is required when auto_replenish is true"
          })
        }
        yield* requireEndUser(platformId, endUserId)
        const existing = yield* sql`SELECT 1 FROM budgets WHERE end_user_id = ${endUserId} AND deleted_at IS NULL FOR UPDATE`
        if (existing.length > 0) {
          return yield* new Conflict({ code: "conflict", message: "This end user already has a budget; PATCH it or DELETE it first" })
        }
        return yield* open({
          platformId,
          endUserId,
          maxUsd: input.max_usd,
          period: input.period,
          autoReplenish: input.auto_replenish,
          replenishAmount: input.replenish_amount,
          lowBalanceThreshold: input.low_balance_threshold
        }, actor)
      }).pipe(
        sql.withTransaction,
        Effect.catchTag("SqlError", (e) =>
          isUniqueViolation(e)
            ? new Conflict({ code: "conflict", message: "This end user already has a budget" })
            : Effect.die(e))
      )

    /** GET: the live budget, reset first when its period has elapsed. */
    const get = (platformId: string, endUserId: string) =>
      Effect.gen(function*() {
        return yield* lockCurrent(platformId, endUserId, yield* now)
      }).pipe(sql.withTransaction, Effect.catchTag("SqlError", Effect.die))

    /** PATCH: config, suspension and activity changes; one adjustment row and its webhooks. */
    const update = (platformId: string, endUserId: string, patch: UpdateBudget, actor: Actor) =>
      Effect.gen(function*() {
        const at = yield* now
        const before = yield* lockCurrent(platformId, endUserId, at)
        const autoReplenish = patch.auto_replenish ?? before.auto_replenish
        const replenishAmount = patch.replenish_amount === undefined
          ? before.replenish_amount
          : patch.replenish_amount === null
          ? null
          : sqlDec(patch.replenish_amount)
        if (autoReplenish && replenishAmount === null) {
          return yield* new ValidationError({
            code: "validation_error",
            param: "replenish_amount",
            message: "replenish_amount is required when auto_replenish is true"
          })
        }
        const threshold = patch.low_balance_threshold === undefined
          ? before.low_balance_threshold
          : patch.low_balance_threshold === null
          ? null
          : sqlDec(patch.low_balance_threshold)
        // A new period kind starts counting now.
        const periodChanged = patch.period !== undefined && patch.period !== before.period
        const [after] = yield* sql<BudgetRow>`UPDATE budgets SET
            max_usd = ${patch.max_usd === undefined ? before.max_usd : sqlDec(patch.max_usd)},
            period = ${patch.period ?? before.period},
            period_start = ${periodChanged ? at : before.period_start},
            period_anchor = ${periodChanged ? at : before.period_anchor},
            auto_replenish = ${autoReplenish},
            replenish_amount = ${replenishAmount},
            low_balance_threshold = ${threshold},
            is_active = ${patch.is_active ?? before.is_active},
            is_suspended = ${patch.is_suspended ?? before.is_suspended},
            updated_at = ${at}
          WHERE id = ${before.id} RETURNING *`
        const transaction = yield* insertTransaction(before, after!, {
          type: "adjustment",
          amount: BigDecimal.subtract(dec(after!.max_usd), dec(before.max_usd)),
          reason: patch.reason ?? null,
          metadata: patch.metadata ?? {},
          actor,
          at
        })
        const change = { budget: after!, transaction }
        if (!before.is_suspended && after!.is_suspended) yield* emit("budget.suspended", change)
        if (before.is_suspended && !after!.is_suspended) yield* emit("budget.unsuspended", change)
        return change
      })

    /** DELETE: soft delete (is_active false); the user then spends against the platform wallet. */
    const remove = (platformId: string, endUserId: string, actor: Actor) =>
      Effect.gen(function*() {
        const at = yield* now
        const before = yield* lockCurrent(platformId, endUserId, at)
        const [after] = yield* sql<BudgetRow>`UPDATE budgets SET is_active = false, deleted_at = ${at}, updated_at = ${at}
          WHERE id = ${before.id} RETURNING *`
        yield* insertTransaction(before, after!, {
          type: "adjustment",
          amount: "0",
          reason: "budget_deleted",
          metadata: {},
          actor,
          at
        })
      }).pipe(sql.withTransaction, Effect.catchTag("SqlError", Effect.die))

    /** Topup: max_usd += amount; re-arms the low-balance alert. */
    const topup = (platformId: string, endUserId: string, input: LedgerAmount, actor: Actor) =>
      Effect.gen(function*() {
        const at = yield* now
        const before = yield* lockCurrent(platformId, endUserId, at)
        const [after] = yield* sql<BudgetRow>`UPDATE budgets SET max_usd = max_usd + ${sqlDec(input.amount_usd)},
            low_balance_armed = true, updated_at = ${at}
          WHERE id = ${before.id} RETURNING *`
        const transaction = yield* insertTransaction(before, after!, {
          type: "topup",
          amount: input.amount_usd,
          reason: input.reason ?? null,
          metadata: input.metadata ?? {},
          actor,
          at
        })
        const change = { budget: after!, transaction }
        yield* emit("budget.topped_up", change)
        return change
      })

    /**
     * Debit of a locked, reset budget: used_usd += amount, never refused for balance or
     * suspension. Shared by the manual debit and inference settlement.
     */
    const debitLocked = (
      before: BudgetRow,
      input: { readonly amount: BigDecimal.BigDecimal; readonly reason: string | null; readonly metadata: Record<string, unknown> },
      actor: Actor,
      at: Date
    ) =>
      Effect.gen(function*() {
        const crossed = crossesLowBalance(before, input.amount)
        const [after] = yield* sql<BudgetRow>`UPDATE budgets SET used_usd = used_usd + ${sqlDec(input.amount)},
            low_balance_armed = ${before.low_balance_armed && !crossed}, updated_at = ${at}
          WHERE id = ${before.id} RETURNING *`
        const transaction = yield* insertTransaction(before, after!, {
          type: "debit",
          amount: input.amount,
          reason: input.reason,
          metadata: input.metadata,
          actor,
          at
        })
        const change = { budget: after!, transaction }
        if (crossed) yield* emit("budget.low_balance", change)
        yield* emit("budget.debited", change)
        return change
      })

    /**
     * Many settlements of one locked, reset budget at once (grouped settlement writes): the
     * same ledger rows, before/after chain, display charges and events as applying each with
     * debitLocked in turn, in one statement (two when webhook events need the ledger rows
     * back). An item without an amount
     * only charges the display ledger (a free call).
     */
    const debitManyLocked = (
      before: BudgetRow,
      items: ReadonlyArray<DebitItem>,
      /** Which event types the platform's endpoints want, when the caller read it already. */
      subscribed?: (type: BudgetEventType) => boolean
    ) =>
      Effect.gen(function*() {
        const plan = planDebits(before, items)
        if (plan.final === before) return before
        return yield* writePlan(plan, subscribed ?? (yield* outbox.subscribedTypes(before.platform_id)))
      })

    /** One budget's planned debits, with the events the platform's endpoints want. */
    const writePlan = (plan: DebitPlan, wanted: (type: BudgetEventType) => boolean) =>
      Effect.gen(function*() {
        const update = sql`UPDATE budgets SET used_usd = used_usd + ${plan.usd},
            used_display = used_display + ${plan.display}, low_balance_armed = ${plan.final.low_balance_armed},
            updated_at = ${plan.final.updated_at}
          WHERE id = ${plan.before.id} RETURNING *`
        if (plan.steps.length === 0) return (yield* sql<BudgetRow>`${update}`)[0]!
        const insert = insertDebits(ledgerRowsOf([plan]))
        const events = eventsOf(plan, wanted)
        // No event wants the ledger rows back (the usual case): rows and budget in one round trip.
        if (events.length === 0) return (yield* sql<BudgetRow>`WITH ledger AS (${insert}) ${update}`)[0]!
        const [final] = yield* sql<BudgetRow>`${update}`
        const byId = new Map((yield* sql<TransactionRow>`${insert} RETURNING *`).map((t) => [t.id, t]))
        for (const { step, type } of events) {
          yield* step.item.traced(emit(type, { budget: step.after, transaction: byId.get(step.id)! }))
        }
        return final!
      })

    /**
     * Several locked, reset budgets' settlements (grouped settlement writes, one budget per end
     * user): every budget no webhook event is wanted for in ONE statement (ledger rows and
     * updates of all of them), the others one by one with their events (writePlan).
     */
    const debitBudgetsLocked = (
      batches: ReadonlyArray<{ readonly before: BudgetRow; readonly items: ReadonlyArray<DebitItem> }>,
      subscribed: (platformId: string) => ((type: BudgetEventType) => boolean) | undefined
    ) =>
      Effect.gen(function*() {
        const quiet: Array<DebitPlan> = []
        for (const { before, items } of batches) {
          const plan = planDebits(before, items)
          if (plan.final === before) continue
          const wanted = subscribed(before.platform_id) ?? (yield* outbox.subscribedTypes(before.platform_id))
          if (eventsOf(plan, wanted).length === 0) quiet.push(plan)
          else yield* writePlan(plan, wanted)
        }
        if (quiet.length === 0) return
        const updates = JSON.stringify(quiet.map((plan) => ({
          id: plan.before.id,
          usd: plan.usd,
          display: plan.display,
          armed: plan.final.low_balance_armed,
          updated_at: plan.final.updated_at.toISOString()
        })))
        const update = sql`UPDATE budgets b SET used_usd = b.used_usd + u.usd, used_display = b.used_display + u.display,
            low_balance_armed = u.armed, updated_at = u.updated_at
          FROM jsonb_to_recordset(${updates}::jsonb) AS u(id uuid, usd numeric, display numeric, armed boolean, updated_at timestamptz)
          WHERE b.id = u.id`
        const rows = ledgerRowsOf(quiet)
        yield* rows.length === 0 ? update : sql`WITH ledger AS (${insertDebits(rows)}) ${update}`
      })

    const insertDebits = (rows: ReadonlyArray<Record<string, unknown>>) => insertDebitRows(sql, rows)

    const debit = (platformId: string, endUserId: string, input: LedgerAmount, actor: Actor) =>
      Effect.gen(function*() {
        const at = yield* now
        const before = yield* lockCurrent(platformId, endUserId, at)
        return yield* debitLocked(before, {
          amount: input.amount_usd,
          reason: input.reason ?? null,
          metadata: input.metadata ?? {}
        }, actor, at)
      })

    /** The live budget's ledger rows in backfill order (BackfillPage), after `since` and `after`. */
    const transactions = (platformId: string, endUserId: string, params: BackfillParams) =>
      Effect.gen(function*() {
        const budget = yield* get(platformId, endUserId)
        const page = yield* backfillPage<TransactionRow>(sql, {
          source: sql`budget_transactions t`,
          scope: sql`t.budget_id = ${budget.id}`,
          columns: sql`t.*`
        }, params)
        return {
          data: page.rows.map(({ cursor, row }) => ({ ...toTransaction(row), cursor })),
          limit: params.limit,
          next_cursor: page.next
        }
      })

    const list = (platformId: string, params: Parameters<typeof listBudgets>[2]) => listBudgets(sql, platformId, params)

    /** The live budget of an end user, if any (no lock, no reset: for read-only views). */
    const findLive = (endUserId: string) =>
      sql<BudgetRow>`SELECT * FROM budgets WHERE end_user_id = ${endUserId} AND deleted_at IS NULL`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0]))
      )

    return {
      open,
      requireEndUser,
      create,
      get,
      update,
      remove,
      topup,
      debit,
      debitLocked,
      debitManyLocked,
      debitBudgetsLocked,
      lockCurrent,
      lockActive,
      activeLocked,
      transactions,
      list,
      findLive,
      now
    } as const
  })
}) {}
