// DisplayLedger: the optional product-unit ledger on each budget row (max_display, used_display).
// Platforms initialise, top up, adjust and disable it (each writing an audit row); settlement
// applies the platform's rules additively in the same transaction as the USD debit.
import { PgClient } from "@effect/sql-pg"
import { BigDecimal, Effect } from "effect"
import { Conflict, NotFound } from "../../schemas/Errors.js"
import type { DisplayRule, PlatformSettings } from "../../schemas/Platforms.js"
import type {
  AdjustWallet,
  AdjustWalletResult,
  DisplayTransaction,
  InitWallet,
  InitWalletResult,
  MyBudget,
  WalletTopupBody,
  WalletTopupResult,
  WalletView
} from "../../schemas/Wallet.js"
import { dec, sqlDec } from "../lib/Money.js"
import { type BackfillParams, backfillPage } from "./BackfillPage.js"
import { type Actor, BudgetLedger, type BudgetRow } from "./BudgetLedger.js"

type WalletSettings = NonNullable<PlatformSettings["end_user_wallet"]>

const ZERO = BigDecimal.make(0n, 0)

/** What one settled call adds to used_display under the platform's rules. */
export const ruleCharge = (
  rules: ReadonlyArray<DisplayRule>,
  usage: { readonly costUsd: BigDecimal.BigDecimal; readonly inferenceCalls: number; readonly toolCalls: number }
): BigDecimal.BigDecimal =>
  rules.reduce((sum, rule) => {
    const n = (x: number) => BigDecimal.unsafeFromString(String(x))
    if (rule.trigger === "usd_spent") return BigDecimal.sum(sum, BigDecimal.multiply(n(rule.amount_per_usd), usage.costUsd))
    const count = rule.trigger === "inference_call" ? usage.inferenceCalls : usage.toolCalls
    return BigDecimal.sum(sum, BigDecimal.multiply(n(rule.amount), n(count)))
  }, ZERO)

/** Pre-flight: is the display ledger (enforced only while the platform enables it) exhausted? */
export const displayExhausted = (row: BudgetRow, settings: WalletSettings | null): boolean =>
  settings?.enabled === true && row.max_display !== null &&
  BigDecimal.greaterThanOrEqualTo(dec(row.used_display), dec(row.max_display))

interface DisplayTransactionRow {
  readonly id: string
  readonly budget_id: string
  readonly type: DisplayTransaction["type"]
  readonly amount_display: string
  readonly max_display_before: string | null
  readonly max_display_after: string | null
  readonly used_display_before: string
  readonly used_display_after: string
  readonly reason: string | null
  readonly metadata: Record<string, unknown>
  readonly actor_type: DisplayTransaction["actor_type"]
  readonly actor_key_id: string | null
  readonly created_at: Date
}

const notInitialized = new Conflict({
  code: "display_ledger_not_initialized",
  message: "The display ledger is not initialised: POST /wallet with max_display first"
})

export class DisplayLedger extends Effect.Service<DisplayLedger>()("gateway/DisplayLedger", {
  dependencies: [BudgetLedger.Default],
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const ledger = yield* BudgetLedger

    const walletSettings = (platformId: string) =>
      sql<{ wallet: WalletSettings | null }>`SELECT settings->'end_user_wallet' AS wallet FROM platforms WHERE id = ${platformId}`.pipe(
        Effect.map((rows) => rows[0]?.wallet ?? null),
        Effect.orDie
      )

    const audit = (
      before: BudgetRow,
      after: BudgetRow,
      type: "opening" | "topup" | "adjustment",
      amount: BigDecimal.BigDecimal,
      reason: string | null,
      actor: Actor,
      at: Date
    ) =>
      sql`INSERT INTO display_transactions (budget_id, platform_id, type, amount_display, max_display_before,
          max_display_after, used_display_before, used_display_after, reason, actor_type, actor_key_id, created_at)
        VALUES (${after.id}, ${after.platform_id}, ${type}, ${sqlDec(amount)}, ${before.max_display}, ${after.max_display},
          ${before.used_display}, ${after.used_display}, ${reason}, ${actor.type}, ${actor.keyId}, ${at})`

    const view = (platformId: string, endUserId: string) =>
      Effect.gen(function*() {
        const row = yield* ledger.get(platformId, endUserId)
        const settings = yield* walletSettings(platformId)
        const max = dec(row.max_usd)
        const used = dec(row.used_usd)
        const result: WalletView = {
          end_user_id: row.end_user_id,
          budget_id: row.id,
          usd_ledger: {
            max_usd: max,
            used_usd: used,
            remaining_usd: BigDecimal.subtract(max, used),
            is_active: row.is_active,
            is_suspended: row.is_suspended
          },
          display_ledger: row.max_display === null ? null : {
            unit: settings?.unit ?? "credits",
            max: dec(row.max_display),
            used: dec(row.used_display),
            remaining: BigDecimal.subtract(dec(row.max_display), dec(row.used_display)),
            active_rules: (settings?.rules ?? []).map((r) => ({
              trigger: r.trigger,
              amount: r.trigger === "usd_spent" ? r.amount_per_usd : r.amount
            }))
          }
        }
        return result
      })

    /** Initialise (opening row, used 0) or overwrite max_display (topup row with the signed delta). */
    const init = (platformId: string, endUserId: string, input: InitWallet, actor: Actor) =>
      Effect.gen(function*() {
        const at = yield* ledger.now
        const before = yield* ledger.lockCurrent(platformId, endUserId, at)
        const reason = input.reason ?? null
        if (before.max_display === null) {
          const [after] = yield* sql<BudgetRow>`UPDATE budgets SET max_display = ${sqlDec(input.max_display)}, used_display = 0,
              updated_at = ${at} WHERE id = ${before.id} RETURNING *`
          yield* audit(before, after!, "opening", input.max_display, reason, actor, at)
          return result(after!, false)
        }
        const delta = BigDecimal.subtract(input.max_display, dec(before.max_display))
        if (BigDecimal.isZero(delta)) return result(before, true)
        const [after] = yield* sql<BudgetRow>`UPDATE budgets SET max_display = ${sqlDec(input.max_display)}, updated_at = ${at}
          WHERE id = ${before.id} RETURNING *`
        yield* audit(before, after!, "topup", delta, reason, actor, at)
        return result(after!, false)
      })

    const result = (row: BudgetRow, noChanges: boolean): InitWalletResult => ({
      budget_id: row.id,
      max_display: dec(row.max_display ?? "0"),
      used_display: dec(row.used_display),
      idempotent_replay: false,
      no_changes: noChanges
    })

    const topup = (platformId: string, endUserId: string, input: WalletTopupBody, actor: Actor) =>
      Effect.gen(function*() {
        const at = yield* ledger.now
        const before = yield* ledger.lockCurrent(platformId, endUserId, at)
        if (before.max_display === null) return yield* notInitialized
        const [after] = yield* sql<BudgetRow>`UPDATE budgets SET max_display = max_display + ${sqlDec(input.amount_display)},
            updated_at = ${at} WHERE id = ${before.id} RETURNING *`
        yield* audit(before, after!, "topup", input.amount_display, input.reason ?? null, actor, at)
        const out: WalletTopupResult = {
          budget_id: after!.id,
          max_display: dec(after!.max_display!),
          used_display: dec(after!.used_display),
          amount_display: input.amount_display,
          idempotent_replay: false
        }
        return out
      })

    /** delta moves the balance (max - used); used_display is clamped to [0, max_display]. */
    const adjust = (platformId: string, endUserId: string, input: AdjustWallet, actor: Actor) =>
      Effect.gen(function*() {
        const at = yield* ledger.now
        const before = yield* ledger.lockCurrent(platformId, endUserId, at)
        if (before.max_display === null) return yield* notInitialized
        const max = dec(before.max_display)
        const usedBefore = dec(before.used_display)
        const wanted = BigDecimal.subtract(usedBefore, input.delta)
        const usedAfter = BigDecimal.clamp(wanted, { minimum: ZERO, maximum: max })
        const applied = BigDecimal.subtract(usedBefore, usedAfter)
        const [after] = yield* sql<BudgetRow>`UPDATE budgets SET used_display = ${sqlDec(usedAfter)}, updated_at = ${at}
          WHERE id = ${before.id} RETURNING *`
        yield* audit(before, after!, "adjustment", applied, input.reason, actor, at)
        const out: AdjustWalletResult = {
          budget_id: after!.id,
          max_display: max,
          used_display: usedAfter,
          requested_delta: input.delta,
          applied_delta: applied,
          clamped: !BigDecimal.equals(applied, input.delta),
          idempotent_replay: false
        }
        return out
      })

    /** DELETE: back to uninitialised with one `wallet_disabled` row; USD untouched; repeat is a no-op. */
    const disable = (platformId: string, endUserId: string, actor: Actor) =>
      Effect.gen(function*() {
        const at = yield* ledger.now
        const before = yield* ledger.lockCurrent(platformId, endUserId, at)
        if (before.max_display === null) return
        const [after] = yield* sql<BudgetRow>`UPDATE budgets SET max_display = NULL, used_display = 0, updated_at = ${at}
          WHERE id = ${before.id} RETURNING *`
        yield* audit(before, after!, "adjustment", BigDecimal.negate(dec(before.max_display)), "wallet_disabled", actor, at)
      })

    /**
     * GET /v1/me/budget. Display shape when the platform enabled the wallet display and the
     * ledger is initialised; legacy platforms (no `end_user_wallet` settings at all) see their
     * USD ledger with unit `USD`; everything else is one indistinguishable 404.
     */
    const mine = (platformId: string, endUserId: string) =>
      Effect.gen(function*() {
        const hidden = new NotFound({ code: "not_found", message: "No display budget for this user" })
        const settings = yield* walletSettings(platformId)
        const row = yield* ledger.get(platformId, endUserId).pipe(Effect.catchTag("NotFound", () => Effect.fail(hidden)))
        const shape = (unit: string, max: BigDecimal.BigDecimal, used: BigDecimal.BigDecimal): MyBudget => ({
          unit,
          max,
          used,
          remaining: BigDecimal.subtract(max, used),
          period: row.period,
          period_start: row.period_start
        })
        if (settings === null) return shape("USD", dec(row.max_usd), dec(row.used_usd))
        if (settings.enabled !== true || row.max_display === null) return yield* hidden
        return shape(settings.unit ?? "credits", dec(row.max_display), dec(row.used_display))
      })

    const exhausted = displayExhausted

    /** Settlement: add the rules' charge to used_display of a locked budget (same transaction). */
    const charge = (
      row: BudgetRow,
      settings: WalletSettings | null,
      usage: { readonly costUsd: BigDecimal.BigDecimal; readonly inferenceCalls: number; readonly toolCalls: number }
    ) =>
      Effect.gen(function*() {
        if (settings?.enabled !== true || row.max_display === null) return ZERO
        const amount = ruleCharge(settings.rules ?? [], usage)
        if (BigDecimal.isZero(amount)) return ZERO
        yield* sql`UPDATE budgets SET used_display = used_display + ${sqlDec(amount)} WHERE id = ${row.id}`
        return amount
      })

    /**
     * The end user's display-ledger rows in backfill order (BackfillPage), across every budget
     * the user has had (a deleted budget's rows stay in the history).
     */
    const transactions = (platformId: string, endUserId: string, params: BackfillParams) =>
      Effect.gen(function*() {
        yield* ledger.requireEndUser(platformId, endUserId).pipe(Effect.catchTag("SqlError", Effect.die))
        const page = yield* backfillPage<DisplayTransactionRow>(sql, {
          source: sql`display_transactions t`,
          scope: sql`t.platform_id = ${platformId}
            AND t.budget_id IN (SELECT id FROM budgets WHERE end_user_id = ${endUserId} AND platform_id = ${platformId})`,
          columns: sql`t.*`
        }, params)
        const amount = (value: string | null) => value === null ? null : dec(value)
        return {
          data: page.rows.map(({ cursor, row }): DisplayTransaction => ({
            id: row.id,
            budget_id: row.budget_id,
            type: row.type,
            amount_display: dec(row.amount_display),
            max_display_before: amount(row.max_display_before),
            max_display_after: amount(row.max_display_after),
            used_display_before: dec(row.used_display_before),
            used_display_after: dec(row.used_display_after),
            reason: row.reason,
            metadata: row.metadata,
            actor_type: row.actor_type,
            actor_key_id: row.actor_key_id,
            created_at: row.created_at,
            cursor
          })),
          limit: params.limit,
          next_cursor: page.next
        }
      })

    return { view, init, topup, adjust, disable, mine, exhausted, charge, walletSettings, transactions } as const
  })
}) {}
