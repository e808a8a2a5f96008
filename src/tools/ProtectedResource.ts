// The tool service as an OAuth protected resource (MCP authorization, RFC 9728, RFC 6750): the
// metadata documents under /.well-known/oauth-protected-resource and the `WWW-Authenticate`
// challenge of its 401s. The bearer is an end-user key the platform hands out, so no
// authorization server is advertised (docs/decisions.md, "MCP").
import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { NotFound } from "../../schemas/Errors.js"
import { mcpPublicUrl } from "../../layers/platform/Listeners.js"
import { toolAppBySlug } from "../../layers/tools/apps/Registry.js"
import { mcpIdentity } from "../../layers/tools/McpIdentity.js"
import { PERSONAL } from "../../layers/tools/Personal.js"

export const WELL_KNOWN_PATH = "/.well-known/oauth-protected-resource"

/** The MCP server a listener path names: `""` for `/mcp`, the slug for `/mcp/{known app}`. */
const mcpSlugOf = (path: string): string | undefined => {
  if (path === "/mcp") return PERSONAL
  const slug = /^\/mcp\/([^/]+)$/.exec(path)?.[1]
  return slug !== undefined && toolAppBySlug(slug) !== undefined ? slug : undefined
}

/** RFC 9728 3.1: the well-known segment goes between the origin and the resource's path. */
const metadataUrlOf = (resource: string) => {
  const url = new URL(resource)
  return `${url.origin}${WELL_KNOWN_PATH}${url.pathname === "/" ? "" : url.pathname}`
}

/** The resource a request path belongs to: its MCP server's URL, else the tool service as a whole. */
const resourceOf = (mcpUrl: string, path: string) => (mcpSlugOf(path) === undefined ? mcpUrl : `${mcpUrl}${path}`)

const quoted = (value: string) => `"${value.replace(/["\\]/g, "\\$&")}"`

export interface ChallengeError {
  readonly error: "invalid_token" | "insufficient_scope"
  readonly description: string
  /** The key scope that would have been enough. */
  readonly scope?: string
}

/**
 * `WWW-Authenticate` for a refusal of the current request, pointing at the metadata of the
 * resource it was sent to. A request without a key gets no `error` (RFC 6750 3.1).
 */
export const bearerChallenge = (refusal: ChallengeError | undefined) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const mcpUrl = yield* mcpPublicUrl
    const path = new URL(request.url, "http://tools.local").pathname
    const params = [`resource_metadata=${quoted(metadataUrlOf(resourceOf(mcpUrl, path)))}`]
    if (refusal !== undefined) {
      params.push(`error=${quoted(refusal.error)}`, `error_description=${quoted(refusal.description)}`)
      if (refusal.scope !== undefined) params.push(`scope=${quoted(refusal.scope)}`)
    }
    return `Bearer ${params.join(", ")}`
  })

/**
 * The path of the resource a metadata URL's suffix names, relative to `{mcp_url}`: `""` for the
 * tool service itself, `/mcp` or `/mcp/{app}`. `{mcp_url}` may carry a path (behind a proxy);
 * the suffix then starts with it.
 */
const resourcePathOf = (suffix: string, basePath: string): string | undefined => {
  if (suffix === "") return ""
  if (!suffix.startsWith(basePath)) return undefined
  const rest = suffix.slice(basePath.length)
  return rest === "" || mcpSlugOf(rest) !== undefined ? rest : undefined
}

/**
 * GET /.well-known/oauth-protected-resource[/{resource path}]: the document of `{mcp_url}`,
 * `{mcp_url}/mcp` or `{mcp_url}/mcp/{app}`; any other path names no resource (404). Public and
 * the same for everyone, so any origin may read it.
 */
export const protectedResourceMetadata = Effect.gen(function*() {
  const request = yield* HttpServerRequest.HttpServerRequest
  const mcpUrl = yield* mcpPublicUrl
  const suffix = new URL(request.url, "http://tools.local").pathname.slice(WELL_KNOWN_PATH.length)
  const path = resourcePathOf(suffix, new URL(mcpUrl).pathname.replace(/\/+$/, ""))
  if (path === undefined) {
    return yield* new NotFound({ code: "not_found", message: "No protected resource at this path" })
  }
  const slug = mcpSlugOf(path)
  return HttpServerResponse.unsafeJson({
    resource: `${mcpUrl}${path}`,
    bearer_methods_supported: ["header"],
    resource_name: slug === undefined ? "Tool service (gateway)" : mcpIdentity(slug).title
  }, { headers: { "access-control-allow-origin": "*" } })
})
