// Handlers of webhook endpoint management. SKELETON: being implemented.
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { GatewayApi } from "../http/Api.js"

export const WebhooksLive = HttpApiBuilder.group(GatewayApi, "webhooks", (handlers) => Effect.succeed(handlers))
