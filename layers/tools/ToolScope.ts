// Which keys may use the tool service: the `tools` scope, or `inference` (the default scope, so
// keys created without scopes keep access). Capability search and run keep their own rule
// (`inference`, layers/capabilities/Capabilities.ts) wherever they are reached from.
import { Effect } from "effect"
import { Forbidden } from "../../schemas/Errors.js"
import type { EndUserPrincipal } from "../access/KeyAuth.js"

/** The scope that grants the tool service alone (tool apps, OAuth connections, MCP sessions). */
export const TOOLS_SCOPE = "tools"

export const mayUseTools = (principal: EndUserPrincipal): boolean =>
  principal.scopes.includes(TOOLS_SCOPE) || principal.scopes.includes("inference")

const insufficientScope = new Forbidden({
  code: "insufficient_scope",
  message: "This key lacks the tools scope (or inference) needed by the tool service"
})

/** Fails with 403 insufficient_scope before anything is read, written or metered. */
export const requireToolScope = (principal: EndUserPrincipal): Effect.Effect<void, Forbidden> =>
  mayUseTools(principal) ? Effect.void : Effect.fail(insufficientScope)
