// Handlers of the budget endpoints.
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { GatewayApi } from "../http/Api.js"

export const BudgetsLive = HttpApiBuilder.group(GatewayApi, "budgets", (handlers) => Effect.succeed(handlers))
