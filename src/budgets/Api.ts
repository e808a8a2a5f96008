// Budgets (USD ledger) endpoints: one budget per end user, its topups, debits and ledger rows,
// and the platform-wide budget list. Platform keys only.
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
import { Paginated, PathId } from "../../schemas/Common.js"
import { Conflict } from "../../schemas/Errors.js"
import { Authentication } from "../http/Authentication.js"

const BudgetPath = Schema.Struct({ platformId: PathId, endUserId: PathId })
const base = "/platforms/:platformId/end-users/:endUserId/budget"

/** `Idempotency-Key` on PATCH, topup and debit. */
export const IdempotencyHeaders = Schema.Struct({
  "idempotency-key": Schema.optional(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(255)))
})

export class BudgetsGroup extends HttpApiGroup.make("budgets")
  .add(
    HttpApiEndpoint.post("createBudget", base)
      .setPath(BudgetPath)
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
  .middleware(Authentication)
  .prefix("/v1") {}
