// Handlers of the budget endpoints. Mutations with an Idempotency-Key run the key check and the
// ledger change in one transaction, so a key is applied at most once.
import { HttpApiBuilder } from "@effect/platform"
import { PgClient } from "@effect/sql-pg"
import { Effect, Schema } from "effect"
import { actorOf, BudgetLedger, type LedgerChange, toBudget } from "../../layers/BudgetLedger.js"
import { DisplayLedger } from "../../layers/DisplayLedger.js"
import { Idempotency } from "../../layers/Idempotency.js"
import { BudgetUpdated, LedgerAmount, LedgerEntryResponse, UpdateBudget } from "../../schemas/Budgets.js"
import {
  AdjustWallet,
  AdjustWalletResult,
  InitWallet,
  InitWalletResult,
  WalletTopupBody,
  WalletTopupResult
} from "../../schemas/Wallet.js"
import { dec } from "../lib/Money.js"
import { requirePlatform } from "../http/Access.js"
import { GatewayApi } from "../http/Api.js"

const entryResponse = (change: LedgerChange): LedgerEntryResponse => ({
  success: true,
  idempotent_replay: false,
  budget_id: change.budget.id,
  max_usd: dec(change.budget.max_usd),
  used_usd: dec(change.budget.used_usd),
  transaction: {
    id: change.transaction.id,
    type: change.transaction.type,
    amount_usd: dec(change.transaction.amount_usd),
    max_usd_after: dec(change.transaction.max_usd_after),
    used_usd_after: dec(change.transaction.used_usd_after),
    reason: change.transaction.reason,
    metadata: change.transaction.metadata,
    created_at: change.transaction.created_at
  }
})

export const BudgetsLive = HttpApiBuilder.group(GatewayApi, "budgets", (handlers) =>
  Effect.gen(function*() {
    const ledger = yield* BudgetLedger
    const idempotency = yield* Idempotency
    const sql = yield* PgClient.PgClient
    const display = yield* DisplayLedger

    /** One transaction: idempotency claim (or replay) + the ledger change. */
    const once = <A extends { readonly idempotent_replay: boolean }, I, B, E, R>(
      operation: string,
      path: { readonly platformId: string; readonly endUserId: string },
      key: string | undefined,
      bodySchema: Schema.Schema<B, unknown>,
      body: B,
      response: Schema.Schema<A, I>,
      apply: Effect.Effect<A, E, R>
    ) =>
      Effect.gen(function*() {
        const canonicalBody = yield* Schema.encode(bodySchema)(body).pipe(Effect.orDie)
        const result = yield* idempotency.once(
          { platformId: path.platformId, operation, target: path.endUserId },
          key,
          canonicalBody,
          response,
          apply
        )
        return result.replay ? { ...result.value, idempotent_replay: true } : result.value
      }).pipe(sql.withTransaction, Effect.catchTag("SqlError", Effect.die))

    return handlers
      .handle("createBudget", ({ path, payload }) =>
        Effect.gen(function*() {
          const principal = yield* requirePlatform(path.platformId)
          return toBudget(yield* ledger.create(path.platformId, path.endUserId, payload, actorOf(principal)))
        }))
      .handle("getBudget", ({ path }) =>
        requirePlatform(path.platformId).pipe(
          Effect.zipRight(ledger.get(path.platformId, path.endUserId)),
          Effect.map(toBudget)
        ))
      .handle("updateBudget", ({ path, payload, headers }) =>
        Effect.gen(function*() {
          const actor = actorOf(yield* requirePlatform(path.platformId))
          return yield* once(
            "budget.update",
            path,
            headers["idempotency-key"],
            UpdateBudget as Schema.Schema<UpdateBudget, unknown>,
            payload,
            BudgetUpdated,
            ledger.update(path.platformId, path.endUserId, payload, actor).pipe(
              Effect.map((change): BudgetUpdated => ({ ...toBudget(change.budget), idempotent_replay: false }))
            )
          )
        }))
      .handle("deleteBudget", ({ path }) =>
        Effect.gen(function*() {
          const principal = yield* requirePlatform(path.platformId)
          yield* ledger.remove(path.platformId, path.endUserId, actorOf(principal))
        }))
      .handle("topupBudget", ({ path, payload, headers }) =>
        Effect.gen(function*() {
          const actor = actorOf(yield* requirePlatform(path.platformId))
          return yield* once(
            "budget.topup",
            path,
            headers["idempotency-key"],
            LedgerAmount as Schema.Schema<LedgerAmount, unknown>,
            payload,
            LedgerEntryResponse,
            ledger.topup(path.platformId, path.endUserId, payload, actor).pipe(Effect.map(entryResponse))
          )
        }))
      .handle("debitBudget", ({ path, payload, headers }) =>
        Effect.gen(function*() {
          const actor = actorOf(yield* requirePlatform(path.platformId))
          return yield* once(
            "budget.debit",
            path,
            headers["idempotency-key"],
            LedgerAmount as Schema.Schema<LedgerAmount, unknown>,
            payload,
            LedgerEntryResponse,
            ledger.debit(path.platformId, path.endUserId, payload, actor).pipe(Effect.map(entryResponse))
          )
        }))
      .handle("listTransactions", ({ path, urlParams }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(ledger.transactions(path.platformId, path.endUserId, urlParams))))
      .handle("listBudgets", ({ path, urlParams }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(ledger.list(path.platformId, urlParams))))
      .handle("getWallet", ({ path }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(display.view(path.platformId, path.endUserId))))
      .handle("initWallet", ({ path, payload, headers }) =>
        Effect.gen(function*() {
          const actor = actorOf(yield* requirePlatform(path.platformId))
          return yield* once("wallet.init", path, headers["idempotency-key"], InitWallet as Schema.Schema<InitWallet, unknown>, payload, InitWalletResult, display.init(path.platformId, path.endUserId, payload, actor))
        }))
      .handle("topupWallet", ({ path, payload, headers }) =>
        Effect.gen(function*() {
          const actor = actorOf(yield* requirePlatform(path.platformId))
          return yield* once("wallet.topup", path, headers["idempotency-key"], WalletTopupBody as Schema.Schema<WalletTopupBody, unknown>, payload, WalletTopupResult, display.topup(path.platformId, path.endUserId, payload, actor))
        }))
      .handle("adjustWallet", ({ path, payload, headers }) =>
        Effect.gen(function*() {
          const actor = actorOf(yield* requirePlatform(path.platformId))
          return yield* once("wallet.adjust", path, headers["idempotency-key"], AdjustWallet as Schema.Schema<AdjustWallet, unknown>, payload, AdjustWalletResult, display.adjust(path.platformId, path.endUserId, payload, actor))
        }))
      .handle("disableWallet", ({ path }) =>
        Effect.gen(function*() {
          const actor = actorOf(yield* requirePlatform(path.platformId))
          yield* display.disable(path.platformId, path.endUserId, actor).pipe(sql.withTransaction, Effect.catchTag("SqlError", Effect.die))
        }))
  }))
