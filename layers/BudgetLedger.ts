// BudgetLedger: the exact USD ledger of each end user. Every mutation of a budget writes
// its ledger row in the same transaction.
import { PgClient } from "@effect/sql-pg"
import { BigDecimal, Effect, Option } from "effect"
import type { Budget, BudgetPeriod } from "../schemas/Budgets.js"
import type { Principal } from "./KeyAuth.js"
import { dec, sqlDec } from "../src/lib/Money.js"

export interface BudgetRow {
  readonly id: string
  readonly platform_id: string
  readonly end_user_id: string
  readonly max_usd: string
  readonly used_usd: string
  readonly period: BudgetPeriod
  readonly period_start: Date
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

/** Who caused a ledger row: the calling key, or the system (resets). */
export interface Actor {
  readonly type: "platform_key" | "end_user_key" | "system"
  readonly keyId: string | null
}

export const actorOf = (principal: Principal): Actor =>
  principal._tag === "PlatformKey"
    ? { type: "platform_key", keyId: principal.keyId }
    : principal._tag === "EndUserKey"
    ? { type: "end_user_key", keyId: principal.keyId }
    : { type: "system", keyId: null }

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

export class BudgetLedger extends Effect.Service<BudgetLedger>()("gateway/BudgetLedger", {
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient

    /** Creates a budget and its opening row; runs inside the caller's transaction if any. */
    const open = (input: NewBudget, actor: Actor) =>
      Effect.gen(function*() {
        const [row] = yield* sql<BudgetRow>`INSERT INTO budgets
            (platform_id, end_user_id, max_usd, period, auto_replenish, replenish_amount, low_balance_threshold)
          VALUES (${input.platformId}, ${input.endUserId}, ${sqlDec(input.maxUsd)}, ${input.period},
            ${input.autoReplenish ?? false},
            ${input.replenishAmount === undefined ? null : sqlDec(input.replenishAmount)},
            ${input.lowBalanceThreshold === undefined ? null : sqlDec(input.lowBalanceThreshold)})
          RETURNING *`
        yield* sql`INSERT INTO budget_transactions
            (budget_id, platform_id, type, amount_usd, max_usd_before, max_usd_after, used_usd_before,
             used_usd_after, reason, metadata, actor_type, actor_key_id)
          VALUES (${row!.id}, ${input.platformId}, 'opening', ${row!.max_usd}, 0, ${row!.max_usd}, 0, 0,
            ${input.reason ?? null}, ${sql.json(input.metadata ?? {})}, ${actor.type}, ${actor.keyId})`
        return row!
      })

    /** The live (not deleted) budget of an end user, if any. */
    const findLive = (endUserId: string) =>
      sql<BudgetRow>`SELECT * FROM budgets WHERE end_user_id = ${endUserId} AND deleted_at IS NULL`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0]))
      )

    return { open, findLive } as const
  })
}) {}
