// Wire shapes of the tool service: app activation (platform key), /v1/me/mcp-config, the OAuth
// nonce, and the tool listener's /apps and /connections bodies.
import { Schema } from "effect"
import { strict, Text, Timestamp } from "./Common.js"

export const ToolAppSlug = Schema.Literal("github", "slack", "gmail", "zendesk")
export type ToolAppSlug = typeof ToolAppSlug.Type

const HttpUrl = Schema.String.pipe(
  Schema.maxLength(2048),
  Schema.filter((s) => {
    try {
      const url = new URL(s)
      return url.protocol === "http:" || url.protocol === "https:"
    } catch {
      return false
    }
  }, { message: () => "must be an absolute http or https URL" })
)

export const ActivateToolApp = Schema.Struct({
  app_slug: ToolAppSlug,
  client_id: Text.pipe(Schema.minLength(1), Schema.maxLength(512)),
  client_secret: Text.pipe(Schema.minLength(1), Schema.maxLength(4096)),
  base_url: HttpUrl
}).annotations(strict)
export type ActivateToolApp = typeof ActivateToolApp.Type

export const ToolAppActivation = Schema.Struct({
  app_slug: ToolAppSlug,
  is_active: Schema.Boolean,
  created_at: Timestamp
})
export type ToolAppActivation = typeof ToolAppActivation.Type

/** GET /v1/platforms/{id}/mcp/apps item: an activation and how many end users connected the app. */
export const ToolAppActivationView = Schema.Struct({
  app_slug: ToolAppSlug,
  base_url: Schema.String,
  is_active: Schema.Boolean,
  connections: Schema.Int.annotations({ description: "End users with a live connection to this app" }),
  needs_reauth: Schema.Int.annotations({ description: "Of those, connections the provider refused (the user must connect again)" }),
  created_at: Timestamp
})
export const ToolAppActivations = Schema.Struct({ data: Schema.Array(ToolAppActivationView) })
export type ToolAppActivations = typeof ToolAppActivations.Type

export const McpServerEntry = Schema.Struct({
  transport: Schema.Literal("streamable_http"),
  url: Schema.String,
  headers: Schema.Struct({ Authorization: Schema.String })
})

export const OpenAiMcpTool = Schema.Struct({
  type: Schema.Literal("mcp"),
  server_label: Schema.String,
  server_url: Schema.String,
  authorization: Schema.String
})

export const McpConfig = Schema.Struct({
  standard: Schema.Record({ key: Schema.String, value: McpServerEntry }),
  openai: Schema.Array(OpenAiMcpTool)
})
export type McpConfig = typeof McpConfig.Type

/**
 * The platform's `nonce` on GET {mcp_url}/oauth/authorize: echoed to its landing route, where it
 * must match the one bound to the browser that started the flow. URL-safe so it travels inside
 * the OAuth state unescaped (no dots: the state uses them as separators).
 */
export const OAuthNonce = Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9_-]{1,128}$/))

/** GET {mcp_url}/apps item. */
export interface ToolAppListing {
  readonly slug: string
  readonly name: string
  readonly tool_count: number
  readonly connected: boolean
}

/** GET {mcp_url}/connections item (camelCase per the spec's MCP connection record). */
export interface McpConnection {
  readonly id: string
  readonly appSlug: string
  readonly createdAt: string
}
