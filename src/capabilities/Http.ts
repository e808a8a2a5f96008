// Handlers of the capabilities endpoints: thin; access rules and the run pipeline live in the
// Capabilities layer so the agent tools (MCP) share them.
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { Capabilities } from "../../layers/capabilities/Capabilities.js"
import { CurrentPrincipal } from "../../layers/access/KeyAuth.js"
import { requireAdmin } from "../http/Access.js"
import { GatewayApi } from "../http/Api.js"

export const CapabilitiesLive = HttpApiBuilder.group(GatewayApi, "capabilities", (handlers) =>
  Effect.gen(function*() {
    const capabilities = yield* Capabilities
    return handlers
      .handle("listCapabilities", () => Effect.flatMap(CurrentPrincipal, capabilities.listCapabilities))
      .handle("getCapability", ({ path, urlParams }) =>
        Effect.flatMap(CurrentPrincipal, (principal) => capabilities.listProviders(principal, path.slug, urlParams)))
      .handle("searchCapabilities", ({ payload }) =>
        Effect.flatMap(CurrentPrincipal, (principal) => capabilities.search(principal, payload.query, payload.limit)))
      .handle("runCapability", ({ payload }) => Effect.flatMap(CurrentPrincipal, (principal) => capabilities.run(principal, payload)))
      .handle("upsertCapabilityProviders", ({ payload }) => requireAdmin.pipe(Effect.zipRight(capabilities.upsertCatalog(payload))))
  }))
