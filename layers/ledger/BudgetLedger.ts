// BudgetLedger: the exact USD ledger of each end user. Every mutation locks the budget row,
// applies a due period reset first (lazily, no scheduler), writes exactly one ledger row per
// change and its webhook outbox rows, all in one transaction.
import { PgClient } from "@effect/sql-pg"
import { randomUUID } from "node:crypto"
import { BigDecimal, Clock, Effect, Option } from "effect"
import type {
  Budget,
  BudgetPeriod,
  BudgetTransaction,
  CreateBudget,
  LedgerAmount,
  UpdateBudget
} from "../../schemas/Budgets.js"
import { Conflict, NotFound, ValidationError } from "../../schemas/Errors.js"
import { isUuid } from "../lib/Ids.js"
import { dec, sqlDec } from "../lib/Money.js"
import { offsetOf, paginate } from "../lib/Pagination.js"
import { currentPeriodStart } from "../lib/Periods.js"
import { isUniqueViolation } from "../lib/SqlErrors.js"
import type { Principal } from "../access/KeyAuth.js"
import { type BudgetEventType, WebhookOutbox } from "./WebhookOutbox.js"

export interface BudgetRow {
  readonly id: string
  readonly platform_id: string
  readonly end_user_id: string
  readonly max_usd: string
  readonly used_usd: string
  readonly period: BudgetPeriod
  readonly period_start: Date
  readonly period_anchor: Date
  readonly auto_replenish: boolean
  readonly replenish_amount: string | null
  readonly low_balance_threshold: string | null
  readonly low_balance_armed: boolean
  readonly is_active: boolean
  readonly is_suspended: boolean
  readonly max_display: string | null
  readonly used_display: string
  readonly created_at: Date
  readonly updated_at: Date
}

interface TransactionRow {
  readonly id: string
  readonly budget_id: string
  readonly type: BudgetTransaction["type"]
  readonly amount_usd: string
  readonly max_usd_before: string
  readonly max_usd_after: string
  readonly used_usd_before: string
  readonly used_usd_after: string
  readonly reason: string | null
  readonly metadata: Record<string, unknown>
  readonly actor_type: BudgetTransaction["actor_type"]
  readonly actor_key_id: string | null
  readonly created_at: Date
}

export const toBudget = (row: BudgetRow): Budget => {
  const max = dec(row.max_usd)
  const used = dec(row.used_usd)
  return {
    id: row.id,
    platform_id: row.platform_id,
    end_user_id: row.end_user_id,
    max_usd: max,
    used_usd: used,
    remaining_usd: BigDecimal.subtract(max, used),
    period: row.period,
    period_start: row.period_start,
    auto_replenish: row.auto_replenish,
    replenish_amount: row.replenish_amount === null ? null : dec(row.replenish_amount),
    low_balance_threshold: row.low_balance_threshold === null ? null : dec(row.low_balance_threshold),
    is_active: row.is_active,
    is_suspended: row.is_suspended,
    created_at: row.created_at,
    updated_at: row.updated_at
  }
}

export const toTransaction = (row: TransactionRow): BudgetTransaction => ({
  id: row.id,
  budget_id: row.budget_id,
  type: row.type,
  amount_usd: dec(row.amount_usd),
  max_usd_before: dec(row.max_usd_before),
  max_usd_after: dec(row.max_usd_after),
  used_usd_before: dec(row.used_usd_before),
  used_usd_after: dec(row.used_usd_after),
  reason: row.reason,
  metadata: row.metadata,
  actor_type: row.actor_type,
  actor_key_id: row.actor_key_id,
  created_at: row.created_at
})

/** Who caused a ledger row: the calling key, or the system (resets). */
export interface Actor {
  readonly type: "platform_key" | "end_user_key" | "system"
  readonly keyId: string | null
}

export const SYSTEM: Actor = { type: "system", keyId: null }

export const actorOf = (principal: Principal): Actor =>
  principal._tag === "PlatformKey"
    ? { type: "platform_key", keyId: principal.keyId }
    : principal._tag === "EndUserKey"
    ? { type: "end_user_key", keyId: principal.keyId }
    : SYSTEM

export interface NewBudget {
  readonly platformId: string
  readonly endUserId: string
  readonly maxUsd: BigDecimal.BigDecimal
  readonly period: BudgetPeriod
  readonly autoReplenish?: boolean | undefined
  readonly replenishAmount?: BigDecimal.BigDecimal | undefined
  readonly lowBalanceThreshold?: BigDecimal.BigDecimal | undefined
  readonly reason?: string | undefined
  readonly metadata?: Record<string, unknown> | undefined
}

/** A mutation's outcome: the budget after it and the ledger row it wrote. */
export interface LedgerChange {
  readonly budget: BudgetRow
  readonly transaction: TransactionRow
}

const noBudget = new NotFound({ code: "not_found", message: "This end user has no budget" })
const noEndUser = new NotFound({ code: "not_found", message: "No such end user" })

const remaining = (row: { readonly max_usd: string; readonly used_usd: string }) =>
  BigDecimal.subtract(dec(row.max_usd), dec(row.used_usd))

/** The low-balance alert fires once, on the debit that takes remaining from above the threshold to or below it. */
const crossesLowBalance = (before: BudgetRow, amount: BigDecimal.BigDecimal): boolean => {
  if (before.low_balance_threshold === null || !before.low_balance_armed) return false
  const threshold = dec(before.low_balance_threshold)
  const remainingBefore = remaining(before)
  return BigDecimal.greaterThan(remainingBefore, threshold) &&
    BigDecimal.lessThanOrEqualTo(BigDecimal.subtract(remainingBefore, amount), threshold)
}

/** One settlement's part of a grouped debit (see debitManyLocked). */
export interface DebitItem {
  readonly amount: BigDecimal.BigDecimal | null
  readonly display: BigDecimal.BigDecimal
  readonly reason: string | null
  readonly metadata: Record<string, unknown>
  readonly actor: Actor
  readonly at: Date
  /** Wraps the item's event writes (the settlement's span, so webhooks join its trace). */
  readonly traced: <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
}

interface DebitStep {
  readonly before: BudgetRow
  readonly after: BudgetRow
  readonly id: string
  readonly crossed: boolean
  readonly item: DebitItem
}

/** A budget's debits computed in order: each step's before/after, and the increments to apply. */
interface DebitPlan {
  readonly before: BudgetRow
  readonly final: BudgetRow
  readonly steps: ReadonlyArray<DebitStep>
  /** Increments, as debitLocked writes them (numeric keeps the scale of what was added). */
  readonly usd: string
  readonly display: string
}

const planDebits = (before: BudgetRow, items: ReadonlyArray<DebitItem>): DebitPlan => {
  const steps: Array<DebitStep> = []
  let row = before
  for (const item of items) {
    const usedDisplay = BigDecimal.format(BigDecimal.sum(dec(row.used_display), item.display))
    if (item.amount === null) {
      row = { ...row, used_display: usedDisplay }
      continue
    }
    const crossed = crossesLowBalance(row, item.amount)
    const after: BudgetRow = {
      ...row,
      used_usd: BigDecimal.format(BigDecimal.sum(dec(row.used_usd), item.amount)),
      used_display: usedDisplay,
      low_balance_armed: row.low_balance_armed && !crossed,
      updated_at: item.at
    }
    steps.push({ before: row, after, id: randomUUID(), crossed, item })
    row = after
  }
  return {
    before,
    final: row,
    steps,
    usd: BigDecimal.format(BigDecimal.subtract(dec(row.used_usd), dec(before.used_usd))),
    display: BigDecimal.format(BigDecimal.subtract(dec(row.used_display), dec(before.used_display)))
  }
}

/** The ledger rows of plans, numbered in order. */
const ledgerRowsOf = (plans: ReadonlyArray<DebitPlan>) =>
  plans.flatMap((plan) => plan.steps).map((step, i) => ({
    i,
    id: step.id,
    budget_id: step.before.id,
    platform_id: step.before.platform_id,
    amount: BigDecimal.format(step.item.amount!),
    max_before: step.before.max_usd,
    max_after: step.after.max_usd,
    used_before: step.before.used_usd,
    used_after: step.after.used_usd,
    reason: step.item.reason,
    metadata: step.item.metadata,
    actor_type: step.item.actor.type,
    actor_key_id: step.item.actor.keyId,
    created_at: step.item.at.toISOString()
  }))

/** The webhook events a plan's steps raise, given what the platform's endpoints want. */
const eventsOf = (plan: DebitPlan, wanted: (type: BudgetEventType) => boolean) =>
  plan.steps.flatMap((step) => [
    ...(step.crossed && wanted("budget.low_balance") ? [{ step, type: "budget.low_balance" as const }] : []),
    ...(wanted("budget.debited") ? [{ step, type: "budget.debited" as const }] : [])
  ])

export class BudgetLedger extends Effect.Service<BudgetLedger>()("gateway/BudgetLedger", {
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const outbox = yield* WebhookOutbox

    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    const insertTransaction = (
      before: BudgetRow,
      after: BudgetRow,
      input: {
        readonly type: BudgetTransaction["type"]
        readonly amount: BigDecimal.BigDecimal | string
        readonly reason: string | null
        readonly metadata: Record<string, unknown>
        readonly actor: Actor
        readonly at: Date
      }
    ) =>
      sql<TransactionRow>`INSERT INTO budget_transactions
          (budget_id, platform_id, type, amount_usd, max_usd_before, max_usd_after, used_usd_before,
           used_usd_after, reason, metadata, actor_type, actor_key_id, created_at)
        VALUES (${after.id}, ${after.platform_id}, ${input.type},
          ${typeof input.amount === "string" ? input.amount : sqlDec(input.amount)},
          ${before.max_usd}, ${after.max_usd}, ${before.used_usd}, ${after.used_usd},
          ${input.reason}, ${sql.json(input.metadata)}, ${input.actor.type}, ${input.actor.keyId}, ${input.at})
        RETURNING *`.pipe(Effect.map((rows) => rows[0]!))

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

    const resetIfDue = (row: BudgetRow, at: Date) =>
      Effect.gen(function*() {
        const due = currentPeriodStart(row.period, row.period_anchor, at)
        if (due.getTime() <= row.period_start.getTime()) return row
        const newMax = row.auto_replenish && row.replenish_amount !== null ? row.replenish_amount : row.max_usd
        const [after] = yield* sql<BudgetRow>`UPDATE budgets SET used_usd = 0, max_usd = ${newMax},
            period_start = ${due}, low_balance_armed = true, updated_at = ${at}
          WHERE id = ${row.id} RETURNING *`
        yield* insertTransaction(row, after!, {
          type: "adjustment",
          amount: BigDecimal.subtract(dec(after!.max_usd), dec(row.max_usd)),
          reason: "period_reset",
          metadata: {
            period: row.period,
            previous_period_start: row.period_start.toISOString(),
            period_start: due.toISOString(),
            replenished: row.auto_replenish && row.replenish_amount !== null
          },
          actor: SYSTEM,
          at
        })
        return after!
      })

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

    /** The debit rows of plans, in order, as one INSERT ... SELECT. */
    const insertDebits = (rows: ReadonlyArray<Record<string, unknown>>) =>
      sql`INSERT INTO budget_transactions
          (id, budget_id, platform_id, type, amount_usd, max_usd_before, max_usd_after, used_usd_before,
           used_usd_after, reason, metadata, actor_type, actor_key_id, created_at)
        SELECT x.id, x.budget_id, x.platform_id, 'debit', x.amount, x.max_before, x.max_after, x.used_before,
          x.used_after, x.reason, x.metadata, x.actor_type, x.actor_key_id, x.created_at
        FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) AS x(i int, id uuid, budget_id uuid, platform_id uuid,
          amount numeric, max_before numeric, max_after numeric, used_before numeric, used_after numeric, reason text,
          metadata jsonb, actor_type text, actor_key_id text, created_at timestamptz)
        ORDER BY x.i`

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

    /** Ledger rows strictly after `since`, oldest first (the backfill order). */
    const transactions = (platformId: string, endUserId: string, params: { readonly since?: Date | undefined; readonly limit: number }) =>
      Effect.gen(function*() {
        const budget = yield* get(platformId, endUserId)
        const rows = yield* sql<TransactionRow>`SELECT * FROM budget_transactions WHERE budget_id = ${budget.id}
          ${params.since === undefined ? sql`` : sql`AND created_at > ${params.since}`}
          ORDER BY created_at, seq LIMIT ${params.limit}`.pipe(Effect.orDie)
        return { data: rows.map(toTransaction), limit: params.limit }
      })

    const list = (
      platformId: string,
      params: {
        readonly end_user_id?: string | undefined
        readonly is_active?: boolean | undefined
        readonly is_suspended?: boolean | undefined
        readonly page: number
        readonly limit: number
      }
    ) => {
      const filters = [
        sql`platform_id = ${platformId}`,
        sql`deleted_at IS NULL`,
        ...(params.end_user_id === undefined
          ? []
          : [isUuid(params.end_user_id) ? sql`end_user_id = ${params.end_user_id}` : sql`false`]),
        ...(params.is_active === undefined ? [] : [sql`is_active = ${params.is_active}`]),
        ...(params.is_suspended === undefined ? [] : [sql`is_suspended = ${params.is_suspended}`])
      ]
      const where = sql.and(filters)
      return paginate(
        params,
        sql<{ total: number }>`SELECT count(*)::int AS total FROM budgets WHERE ${where}`,
        sql<BudgetRow>`SELECT * FROM budgets WHERE ${where} ORDER BY created_at, id
          LIMIT ${params.limit} OFFSET ${offsetOf(params.page, params.limit)}`.pipe(Effect.map((rows) => rows.map(toBudget)))
      ).pipe(Effect.orDie)
    }

    /** The live budget of an end user, if any (no lock, no reset: for read-only views). */
    const findLive = (endUserId: string) =>
      sql<BudgetRow>`SELECT * FROM budgets WHERE end_user_id = ${endUserId} AND deleted_at IS NULL`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0]))
      )

    return {
      open,
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
