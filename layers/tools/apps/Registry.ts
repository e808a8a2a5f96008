// Every tool app the gateway offers, and lookup by slug (the `{slug}` of the MCP tool names
// `{slug}_{tool}` and of the `/mcp/{app_slug}` routes).
import { GitHub } from "./GitHub.js"
import { Gmail } from "./Gmail.js"
import { Slack } from "./Slack.js"
import type { ToolApp } from "./ToolApp.js"
import { Zendesk } from "./Zendesk.js"

export const toolApps: ReadonlyArray<ToolApp> = [GitHub, Slack, Gmail, Zendesk]

const bySlug = new Map<string, ToolApp>(toolApps.map((app) => [app.slug, app]))

/** Takes any string (a URL or query value) so callers need not narrow it to ToolAppSlug first. */
export const toolAppBySlug = (slug: string): ToolApp | undefined => bySlug.get(slug)
