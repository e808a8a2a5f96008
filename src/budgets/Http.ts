// Handlers of the budget endpoints. Mutations with an Idempotency-Key run the key check and the
// ledger change in one transaction, so a key is applied at most once.
import { HttpApiBuilder } from "@effect/platform"
import { PgClient } from "@effect/sql-pg"
import { BigDecimal, Effect, Schema } from "effect"
import { type Actor, actorOf, BudgetLedger, type LedgerChange, toBudget } from "../../layers/ledger/BudgetLedger.js"
import { DisplayLedger } from "../../layers/ledger/DisplayLedger.js"
import { Reservations } from "../../layers/ledger/Reservations.js"
import { Idempotency } from "../../layers/platform/Idempotency.js"
import { Budget, BudgetUpdated, CreateBudget, LedgerAmount, LedgerEntryResponse, UpdateBudget } from "../../schemas/Budgets.js"
import {
  AdjustWallet,
  AdjustWalletResult,
  InitWallet,
  InitWalletResult,
  WalletTopupBody,
  WalletTopupResult
} from "../../schemas/Wallet.js"
import { dec } from "../../layers/lib/Money.js"
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

/** A replayed answer that says so (the ledger answers carry `idempotent_replay`). */
const flagReplay = <A extends { readonly idempotent_replay: boolean }>(value: A): A => ({ ...value, idempotent_replay: true })

interface BudgetPath {
  readonly platformId: string
  readonly endUserId: string
}

export const BudgetsLive = HttpApiBuilder.group(GatewayApi, "budgets", (handlers) =>
  Effect.gen(function*() {
    const ledger = yield* BudgetLedger
    const idempotency = yield* Idempotency
    const sql = yield* PgClient.PgClient
    const display = yield* DisplayLedger
    const reservations = yield* Reservations

    /** The budget with what calls in flight reserve on it (budget_enforcement "reserve"), counted in remaining_usd. */
    const withReserved = (budget: Budget) =>
      Effect.map(reservations.reservedOnBudget(budget.id), (reserved): Budget => ({
        ...budget,
        remaining_usd: BigDecimal.subtract(budget.remaining_usd, reserved),
        reserved_usd: reserved
      }))

    /**
     * A handler for a ledger mutation that honours Idempotency-Key: the key claim (or replay) and
     * the change run in one transaction, so a key applies at most once.
     */
    const keyed = <B, BI, A, AI, E, R>(
      operation: string,
      body: Schema.Schema<B, BI>,
      response: Schema.Schema<A, AI>,
      apply: (path: BudgetPath, payload: B, actor: Actor) => Effect.Effect<A, E, R>,
      onReplay: (value: A) => A
    ) =>
    ({ path, payload, headers }: {
      readonly path: BudgetPath
      readonly payload: B
      readonly headers: { readonly "idempotency-key"?: string | undefined }
    }) =>
      Effect.gen(function*() {
        const actor = actorOf(yield* requirePlatform(path.platformId))
        const canonicalBody = yield* Schema.encode(body)(payload).pipe(Effect.orDie)
        const result = yield* idempotency.once(
          { platformId: path.platformId, operation, target: path.endUserId },
          headers["idempotency-key"],
          canonicalBody,
          response,
          apply(path, payload, actor)
        )
        return result.replay ? onReplay(result.value) : result.value
      }).pipe(sql.withTransaction, Effect.catchTag("SqlError", Effect.die))

    return handlers
      // A replayed create answers the budget as it was created (the record has no replay flag).
      .handle("createBudget", keyed("budget.create", CreateBudget, Budget, (path, payload, actor) =>
        ledger.create(path.platformId, path.endUserId, payload, actor).pipe(Effect.map(toBudget)), (budget) => budget))
      .handle("getBudget", ({ path }) =>
        requirePlatform(path.platformId).pipe(
          Effect.zipRight(ledger.get(path.platformId, path.endUserId)),
          Effect.flatMap((row) => withReserved(toBudget(row)))
        ))
      .handle("updateBudget", keyed("budget.update", UpdateBudget, BudgetUpdated, (path, payload, actor) =>
        ledger.update(path.platformId, path.endUserId, payload, actor).pipe(
          Effect.map((change): BudgetUpdated => ({ ...toBudget(change.budget), idempotent_replay: false }))
        ), flagReplay))
      .handle("deleteBudget", ({ path }) =>
        Effect.gen(function*() {
          const principal = yield* requirePlatform(path.platformId)
          yield* ledger.remove(path.platformId, path.endUserId, actorOf(principal))
        }))
      .handle("topupBudget", keyed("budget.topup", LedgerAmount, LedgerEntryResponse, (path, payload, actor) =>
        ledger.topup(path.platformId, path.endUserId, payload, actor).pipe(Effect.map(entryResponse)), flagReplay))
      .handle("debitBudget", keyed("budget.debit", LedgerAmount, LedgerEntryResponse, (path, payload, actor) =>
        ledger.debit(path.platformId, path.endUserId, payload, actor).pipe(Effect.map(entryResponse)), flagReplay))
      .handle("listTransactions", ({ path, urlParams }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(ledger.transactions(path.platformId, path.endUserId, urlParams))))
      .handle("listBudgets", ({ path, urlParams }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(ledger.list(path.platformId, urlParams))))
      .handle("getWallet", ({ path }) =>
        requirePlatform(path.platformId).pipe(
          Effect.zipRight(display.view(path.platformId, path.endUserId)),
          Effect.flatMap((view) =>
            Effect.map(reservations.reservedOnBudget(view.budget_id), (reserved) => ({
              ...view,
              usd_ledger: { ...view.usd_ledger, remaining_usd: BigDecimal.subtract(view.usd_ledger.remaining_usd, reserved), reserved_usd: reserved }
            })))
        ))
      .handle("initWallet", keyed("wallet.init", InitWallet, InitWalletResult, (path, payload, actor) =>
        display.init(path.platformId, path.endUserId, payload, actor), flagReplay))
      .handle("topupWallet", keyed("wallet.topup", WalletTopupBody, WalletTopupResult, (path, payload, actor) =>
        display.topup(path.platformId, path.endUserId, payload, actor), flagReplay))
      .handle("adjustWallet", keyed("wallet.adjust", AdjustWallet, AdjustWalletResult, (path, payload, actor) =>
        display.adjust(path.platformId, path.endUserId, payload, actor), flagReplay))
      .handle("listWalletTransactions", ({ path, urlParams }) =>
        requirePlatform(path.platformId).pipe(
          Effect.zipRight(display.transactions(path.platformId, path.endUserId, urlParams))
        ))
      .handle("disableWallet", ({ path }) =>
        Effect.gen(function*() {
          const actor = actorOf(yield* requirePlatform(path.platformId))
          yield* display.disable(path.platformId, path.endUserId, actor).pipe(sql.withTransaction, Effect.catchTag("SqlError", Effect.die))
        }))
  }))
