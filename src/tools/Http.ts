// Handlers of the tool-app endpoints on the API host. SKELETON: being implemented.
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { GatewayApi } from "../http/Api.js"

export const ToolsLive = HttpApiBuilder.group(GatewayApi, "tools", (handlers) => Effect.succeed(handlers))
