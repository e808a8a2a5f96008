// The tool service host ({mcp_url}, MCP_PORT). It answers a health probe and OpenAI-shaped 404s
// until the tool apps (MCP, OAuth) are mounted on it.
import { HttpRouter, HttpServer, HttpServerResponse } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Config, Effect, Layer } from "effect"
import { createServer } from "node:http"
import { host } from "../http/Server.js"
import { recordAddress } from "../Listeners.js"

const notFound = Effect.gen(function*() {
  return yield* HttpServerResponse.json(
    { error: { message: "Unknown route", type: "invalid_request_error", code: "not_found", param: null } },
    { status: 404 }
  )
})

export const ToolRouter = HttpRouter.empty.pipe(
  HttpRouter.get("/health", HttpServerResponse.unsafeJson({ status: "ok" }))
)

const ToolApp = ToolRouter.pipe(Effect.catchTag("RouteNotFound", () => notFound))

export const ToolListenerLive = Layer.mergeAll(HttpServer.serve(ToolApp), recordAddress("tools")).pipe(
  Layer.provide(NodeHttpServer.layerConfig(createServer, {
    port: Config.integer("MCP_PORT").pipe(Config.withDefault(8081)),
    host
  }))
)
