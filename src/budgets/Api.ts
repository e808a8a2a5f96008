// Budgets (USD ledger) endpoints.
import { HttpApiGroup } from "@effect/platform"
import { Authentication } from "../http/Authentication.js"

export class BudgetsGroup extends HttpApiGroup.make("budgets").middleware(Authentication).prefix("/v1") {}
