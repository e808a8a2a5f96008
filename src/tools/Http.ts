// Handlers of the tool-app endpoints on the API host.
import { HttpApiBuilder, HttpServerRequest } from "@effect/platform"
import { Effect } from "effect"
import { Unauthorized } from "../../schemas/Errors.js"
import { ToolHost } from "../../layers/tools/ToolHost.js"
import { requireEndUser, requirePlatform } from "../http/Access.js"
import { GatewayApi } from "../http/Api.js"
import { Listeners, mcpPublicUrl } from "../../layers/platform/Listeners.js"

export const ToolsLive = HttpApiBuilder.group(GatewayApi, "tools", (handlers) =>
  Effect.gen(function*() {
    const tools = yield* ToolHost
    const listeners = yield* Listeners
    return handlers
      .handle("activateToolApp", ({ path, payload }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(tools.activate(path.platformId, payload))))
      .handle("listToolApps", ({ path }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(tools.activations(path.platformId))))
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
