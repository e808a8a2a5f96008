// Handlers of the tool-app endpoints on the API host, and {mcp_url} as clients see it.
import { HttpApiBuilder, HttpServerRequest } from "@effect/platform"
import { Config, Effect, Option } from "effect"
import { Unauthorized } from "../../schemas/Errors.js"
import { ToolHost } from "../../layers/ToolHost.js"
import { requireEndUser, requirePlatform } from "../http/Access.js"
import { GatewayApi } from "../http/Api.js"
import { Listeners } from "../Listeners.js"

/** GATEWAY_MCP_PUBLIC_URL, else the tool listener's bound address, else 127.0.0.1:MCP_PORT. */
export const mcpPublicUrl = Effect.gen(function*() {
  const configured = yield* Config.option(Config.string("GATEWAY_MCP_PUBLIC_URL")).pipe(Effect.orDie)
  if (Option.isSome(configured) && configured.value !== "") return configured.value.replace(/\/+$/, "")
  const bound = (yield* (yield* Listeners).all).tools
  if (bound !== undefined) return bound
  const port = yield* Config.integer("MCP_PORT").pipe(Config.withDefault(8081), Effect.orDie)
  return `http://127.0.0.1:${port}`
})

export const ToolsLive = HttpApiBuilder.group(GatewayApi, "tools", (handlers) =>
  Effect.gen(function*() {
    const tools = yield* ToolHost
    const listeners = yield* Listeners
    return handlers
      .handle("activateToolApp", ({ path, payload }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(tools.activate(path.platformId, payload))))
      .handle("getMcpConfig", () =>
        Effect.gen(function*() {
          const principal = yield* requireEndUser
          // Only the key's hash is stored: the raw key comes from this very request (the
          // caller's own key, already authenticated). Never logged.
          const request = yield* HttpServerRequest.HttpServerRequest
          const match = /^Bearer\s+(\S+)\s*$/i.exec(request.headers.authorization ?? "")
          if (match === null) return yield* new Unauthorized({ code: "invalid_api_key", message: "Malformed Authorization header" })
          const mcpUrl = yield* Effect.provideService(mcpPublicUrl, Listeners, listeners)
          return yield* tools.mcpConfig(principal, match[1]!, mcpUrl)
        }))
  }))
