// The contract of a tool app (github, slack, gmail, zendesk): its OAuth settings and its tools.
// ToolHost serves the tools over MCP as `{slug}_{tool}`; each tool calls the provider's real API
// with the end user's access token.
import { Data, type Effect } from "effect"

export type ToolAppSlug = "github" | "slack" | "gmail" | "zendesk"

/** Where and as whom a tool call runs. */
export interface ToolContext {
  /** Provider API base URL (TOOLAPP_<SLUG>_API_URL, else the app's default). */
  readonly apiUrl: string
  readonly accessToken: string
}

/** MCP `CallToolResult` content: text items; `isError` for app-level errors (not protocol errors). */
export interface ToolResult {
  readonly content: ReadonlyArray<{ readonly type: "text"; readonly text: string }>
  readonly isError?: boolean | undefined
}

/**
 * A failed provider call. `reauth` is true for a provider 401 (token revoked or expired beyond
 * refresh): ToolHost marks the connection for re-authorisation and says so in the tool result.
 */
export class AppApiError extends Data.TaggedError("AppApiError")<{
  readonly status: number | null
  readonly message: string
  readonly reauth: boolean
}> {}

export interface ToolDefinition {
  /** Without the app prefix, e.g. `list_repos`. */
  readonly name: string
  readonly description: string
  /** JSON Schema of the arguments: `{ type: "object", properties, required? }`. */
  readonly inputSchema: {
    readonly type: "object"
    readonly properties: Readonly<Record<string, unknown>>
    readonly required?: ReadonlyArray<string>
  }
  /** Arguments are validated against inputSchema by the caller only loosely: check what you use. */
  readonly run: (ctx: ToolContext, args: Readonly<Record<string, unknown>>) => Effect.Effect<ToolResult, AppApiError>
}

export interface OAuthSettings {
  readonly authorizeUrl: string
  readonly tokenUrl: string
  readonly scopes: ReadonlyArray<string>
  readonly scopeSeparator: string
  /** PKCE (S256) where the provider supports it. */
  readonly pkce: boolean
  /** Extra query parameters on the authorize URL (e.g. Google's access_type=offline, prompt=consent). */
  readonly extraAuthorizeParams: Readonly<Record<string, string>>
}

export interface ToolApp {
  readonly slug: ToolAppSlug
  readonly name: string
  readonly defaultApiUrl: string
  readonly oauth: OAuthSettings
  readonly tools: ReadonlyArray<ToolDefinition>
}
