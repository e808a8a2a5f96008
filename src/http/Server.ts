// The API host ({base_url}, PORT): the HttpApi with its handlers, error mapping, OpenAPI
// document at /openapi.json, docs page at /docs and a /health probe; chat completions are
// served by the chat route in front of it unless GATEWAY_CHAT_FRONT_ROUTE is off.
import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { Config, Layer } from "effect"
import { AdminLive } from "../admin/Http.js"
import { BudgetsLive } from "../budgets/Http.js"
import { CapabilitiesLive } from "../capabilities/Http.js"
import { chatFrontRoute } from "../inference/ChatRoute.js"
import { InferenceLive } from "../inference/Http.js"
import { ApiKeysLive, EndUsersLive, PlatformsLive } from "../management/Http.js"
import { recordAddress } from "../../layers/platform/Listeners.js"
import { ToolsLive } from "../tools/Http.js"
import { WebhooksLive } from "../webhooks/Http.js"
import { GatewayApi } from "./Api.js"
import { AuthenticationLive } from "./Authentication.js"
import { DocsPageLive } from "./DocsPage.js"
import { drainingServerLayer } from "./DrainingServer.js"
import { ErrorMappingLive } from "./ErrorMapping.js"
import { embeddedDatabase, withDefaultFrom } from "../../layers/lib/ConfigValues.js"

const HealthLive = HttpApiBuilder.Router.use((router) =>
  router.get("/health", HttpServerResponse.unsafeJson({ status: "ok" }))
)

export const ApiLive = HttpApiBuilder.api(GatewayApi).pipe(
  Layer.provide([InferenceLive, AdminLive, PlatformsLive, ApiKeysLive, EndUsersLive, BudgetsLive, WebhooksLive, ToolsLive, CapabilitiesLive, ErrorMappingLive]),
  Layer.provide(AuthenticationLive)
)

export const HttpAppLive = HttpApiBuilder.serve().pipe(
  // The viewer's script is served from the installed package, read per request (docs/decisions.md).
  Layer.provide(DocsPageLive),
  Layer.provide(HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json" })),
  Layer.provide(HealthLive),
  Layer.provide(ApiLive)
)

/** HOST: loopback for the embedded database's laptop demo, every interface on a server. */
export const host = withDefaultFrom(
  Config.string("HOST"),
  embeddedDatabase.pipe(Config.map((embedded) => (embedded ? "127.0.0.1" : "0.0.0.0")))
)

export const ApiListenerLive = Layer.mergeAll(HttpAppLive, recordAddress("api")).pipe(
  Layer.provide(drainingServerLayer({
    port: Config.integer("PORT").pipe(Config.withDefault(8080)),
    host
  }, chatFrontRoute))
)
