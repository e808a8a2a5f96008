// How each MCP server of the tool service names itself: `serverInfo` in the `initialize` answer
// and `resource_name` in its protected-resource metadata. The name is the same for every user
// (clients key their configuration on it); the title is for people.
import { toolAppBySlug } from "./apps/Registry.js"
import { PERSONAL, PERSONAL_LABEL } from "./Personal.js"

export interface McpIdentity {
  readonly name: string
  readonly title: string
}

/**
 * `{mcp_url}/mcp/{slug}` is `gateway-{slug}`; the per-user URL `{mcp_url}/mcp` is `gateway`, the
 * label mcp-config and hosted tool items give it.
 */
export const mcpIdentity = (slug: string): McpIdentity =>
  slug === PERSONAL
    ? { name: PERSONAL_LABEL, title: "Skills and capabilities (gateway)" }
    : { name: `gateway-${slug}`, title: `${toolAppBySlug(slug)?.name ?? slug} (gateway)` }
