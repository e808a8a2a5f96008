// ToolHost: the tool service. Apps activated per platform, end users' OAuth connections (tokens
// sealed with Crypto, refreshed on expiry, flagged for re-auth on a provider 401), metered tool
// calls, and the MCP sessions of the tool listener. The hybrid loop reuses listTools/callTool.
import { Effect } from "effect"
import { BudgetLedger } from "../ledger/BudgetLedger.js"
import { DisplayLedger } from "../ledger/DisplayLedger.js"
import { PlatformWallet } from "../ledger/PlatformWallet.js"
import { Settlements } from "../ledger/Settlements.js"
import { Crypto } from "../platform/Crypto.js"
import { Capabilities } from "../capabilities/Capabilities.js"
import { makeAccessTokens } from "./AccessTokens.js"
import { makeActivations } from "./Activations.js"
import { loadAppUrls } from "./Catalog.js"
import { makeConnections } from "./Connections.js"
import { makeMcpConfig, makeMcpServer } from "./McpServer.js"
import { makeMetering } from "./Metering.js"
import { makeOAuthFlow } from "./OAuthFlow.js"
import { makePersonalTools } from "./Personal.js"
import { Skills } from "./Skills.js"
import { makeToolCalls } from "./ToolCalls.js"
import type { ToolApp } from "./apps/ToolApp.js"

export type { ToolListing } from "./Catalog.js"
export { mcpSessionTtl } from "./McpServer.js"
export type { CallbackQuery } from "./OAuthFlow.js"
export { PERSONAL, PERSONAL_LABEL } from "./Personal.js"

export class ToolHost extends Effect.Service<ToolHost>()("gateway/ToolHost", {
  dependencies: [BudgetLedger.Default, Capabilities.Default, Crypto.Default, DisplayLedger.Default, PlatformWallet.Default, Settlements.Default, Skills.Default],
  scoped: Effect.gen(function*() {
    const metering = yield* makeMetering
    const appUrls = yield* loadAppUrls.pipe(Effect.orDie)
    const urlsOf = (app: ToolApp) => appUrls.get(app.slug)!

    const activations = yield* makeActivations
    const connections = yield* makeConnections(activations)
    const accessTokens = yield* makeAccessTokens(connections, urlsOf)
    const oauth = yield* makeOAuthFlow(activations, urlsOf)

    // The per-user tool URL (/mcp, no app slug): skills and capability agent tools.
    const personal = yield* makePersonalTools
    const calls = makeToolCalls({ activations, connections, accessTokens, metering, personal, urlsOf })
    const mcp = yield* makeMcpServer(activations, personal, calls)

    return {
      activate: activations.activate,
      activations: activations.list,
      activeApps: activations.activeApps,
      mcpConfig: makeMcpConfig(activations, personal),
      listApps: connections.listApps,
      listConnections: connections.listConnections,
      disconnect: connections.disconnect,
      authorize: oauth.authorize,
      callback: oauth.callback,
      listTools: calls.listTools,
      callTool: calls.callTool,
      handleMcp: mcp.handleMcp
    } as const
  })
}) {}
