// Handlers of the capabilities endpoints. SKELETON: being implemented.
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { GatewayApi } from "../http/Api.js"

export const CapabilitiesLive = HttpApiBuilder.group(GatewayApi, "capabilities", (handlers) => Effect.succeed(handlers))
