// The tool apps as the tool service serves them: lookup by slug, MCP tool names
// (`{slug}_{tool}`, dashes as underscores) and each app's URLs after TOOLAPP_<SLUG>_* overrides.
import { Config, Effect } from "effect"
import { toolApps } from "./apps/Registry.js"
import type { ToolApp, ToolDefinition } from "./apps/ToolApp.js"
import type { AppUrls } from "./OAuth.js"

/** A tool as MCP `tools/list` (and the hybrid loop) shows it. */
export interface ToolListing {
  readonly name: string
  readonly description: string
  readonly inputSchema: ToolDefinition["inputSchema"]
}

export const mcpToolName = (slug: string, tool: string): string => `${slug}_${tool}`.replace(/-/g, "_")

export const appOf = (slug: string): ToolApp | undefined => toolApps.find((a) => a.slug === slug)

/** Accepts the MCP name (`github_list_repos`) or the app's own name (`list_repos`). */
export const findTool = (app: ToolApp, name: string): ToolDefinition | undefined =>
  app.tools.find((t) => mcpToolName(app.slug, t.name) === name) ?? app.tools.find((t) => t.name === name)

export const listingOf = (app: ToolApp): ReadonlyArray<ToolListing> =>
  app.tools.map((t) => ({ name: mcpToolName(app.slug, t.name), description: t.description, inputSchema: t.inputSchema }))

/** Read once at start: TOOLAPP_<SLUG>_API_URL / _AUTHORIZE_URL / _TOKEN_URL, else the app's defaults. */
export const loadAppUrls = Effect.gen(function*() {
  const urls = new Map<string, AppUrls>()
  for (const app of toolApps) {
    const prefix = `TOOLAPP_${app.slug.toUpperCase()}_`
    const apiUrl = yield* Config.string(`${prefix}API_URL`).pipe(Config.withDefault(app.defaultApiUrl))
    const authorizeUrl = yield* Config.string(`${prefix}AUTHORIZE_URL`).pipe(Config.withDefault(app.oauth.authorizeUrl))
    const tokenUrl = yield* Config.string(`${prefix}TOKEN_URL`).pipe(Config.withDefault(app.oauth.tokenUrl))
    urls.set(app.slug, { apiUrl, authorizeUrl, tokenUrl })
  }
  return urls as ReadonlyMap<string, AppUrls>
})
