// Budgets (USD ledger) endpoints: one budget per end user, its topups, debits and ledger rows,
// the platform-wide budget list, and the display wallet on the same budget. Platform keys only.
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema } from "@effect/platform"
import { Schema } from "effect"
import {
  Budget,
  BudgetUpdated,
  CreateBudget,
  LedgerAmount,
  LedgerEntryResponse,
  ListBudgetsParams,
  TransactionsList,
  TransactionsParams,
  UpdateBudget
} from "../../schemas/Budgets.js"
import { BackfillParams, IdempotencyHeaders, Paginated, PathId } from "../../schemas/Common.js"
import { Conflict } from "../../schemas/Errors.js"
import {
  AdjustWallet,
  AdjustWalletResult,
  DisplayTransactions,
  InitWallet,
  InitWalletResult,
  WalletTopupBody,
  WalletTopupResult,
  WalletView
} from "../../schemas/Wallet.js"
import { Authentication } from "../http/Authentication.js"

const BudgetPath = Schema.Struct({ platformId: PathId, endUserId: PathId })
const base = "/platforms/:platformId/end-users/:endUserId/budget"
const wallet = "/platforms/:platformId/end-users/:endUserId/wallet"

export class BudgetsGroup extends HttpApiGroup.make("budgets")
  .add(
    HttpApiEndpoint.post("createBudget", base)
      .setPath(BudgetPath)
      .setHeaders(IdempotencyHeaders)
      .setPayload(CreateBudget)
      .addSuccess(Budget, { status: 201 })
      .addError(Conflict.Http)
  )
  .add(HttpApiEndpoint.get("getBudget", base).setPath(BudgetPath).addSuccess(Budget))
  .add(
    HttpApiEndpoint.patch("updateBudget", base)
      .setPath(BudgetPath)
      .setHeaders(IdempotencyHeaders)
      .setPayload(UpdateBudget)
      .addSuccess(BudgetUpdated)
      .addError(Conflict.Http)
  )
  .add(HttpApiEndpoint.del("deleteBudget", base).setPath(BudgetPath).addSuccess(HttpApiSchema.NoContent))
  .add(
    HttpApiEndpoint.post("topupBudget", `${base}/topup`)
      .setPath(BudgetPath)
      .setHeaders(IdempotencyHeaders)
      .setPayload(LedgerAmount)
      .addSuccess(LedgerEntryResponse)
      .addError(Conflict.Http)
  )
  .add(
    HttpApiEndpoint.post("debitBudget", `${base}/debit`)
      .setPath(BudgetPath)
      .setHeaders(IdempotencyHeaders)
      .setPayload(LedgerAmount)
      .addSuccess(LedgerEntryResponse)
      .addError(Conflict.Http)
  )
  .add(
    HttpApiEndpoint.get("listTransactions", `${base}/transactions`)
      .setPath(BudgetPath)
      .setUrlParams(TransactionsParams)
      .addSuccess(TransactionsList)
  )
  .add(
    HttpApiEndpoint.get("listBudgets", "/platforms/:platformId/budgets")
      .setPath(Schema.Struct({ platformId: PathId }))
      .setUrlParams(ListBudgetsParams)
      .addSuccess(Paginated(Budget))
  )
  .add(HttpApiEndpoint.get("getWallet", wallet).setPath(BudgetPath).addSuccess(WalletView))
  .add(
    HttpApiEndpoint.post("initWallet", wallet)
      .setPath(BudgetPath)
      .setHeaders(IdempotencyHeaders)
      .setPayload(InitWallet)
      .addSuccess(InitWalletResult)
      .addError(Conflict.Http)
  )
  .add(
    HttpApiEndpoint.post("topupWallet", `${wallet}/topup`)
      .setPath(BudgetPath)
      .setHeaders(IdempotencyHeaders)
      .setPayload(WalletTopupBody)
      .addSuccess(WalletTopupResult)
      .addError(Conflict.Http)
  )
  .add(
    HttpApiEndpoint.post("adjustWallet", `${wallet}/adjust`)
      .setPath(BudgetPath)
      .setHeaders(IdempotencyHeaders)
      .setPayload(AdjustWallet)
      .addSuccess(AdjustWalletResult)
      .addError(Conflict.Http)
  )
  .add(HttpApiEndpoint.del("disableWallet", wallet).setPath(BudgetPath).addSuccess(HttpApiSchema.NoContent))
  .add(
    HttpApiEndpoint.get("listWalletTransactions", `${wallet}/transactions`)
      .setPath(BudgetPath)
      .setUrlParams(BackfillParams)
      .addSuccess(DisplayTransactions)
  )
  .middleware(Authentication)
  .prefix("/v1") {}
