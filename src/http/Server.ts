// The API host ({base_url}, PORT): the HttpApi with its handlers, error mapping, OpenAPI
// document at /openapi.json, docs page at /docs, the web console at /console and a /health
// probe; every request passes the API front first (request id, CORS, and the chat route unless
// GATEWAY_CHAT_FRONT_ROUTE is off).
import { HttpApiBuilder, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Config, Effect, Layer } from "effect"
import { AdminLive } from "../admin/Http.js"
import { BudgetsLive } from "../budgets/Http.js"
import { CapabilitiesLive } from "../capabilities/Http.js"
import { InferenceLive } from "../inference/Http.js"
import { ApiKeysLive, EndUsersLive, PlatformsLive } from "../management/Http.js"
import { recordAddress } from "../../layers/platform/Listeners.js"
import { ToolsLive } from "../tools/Http.js"
import { WebhooksLive } from "../webhooks/Http.js"
import { GatewayApi } from "./Api.js"
import { AuthenticationLive } from "./Authentication.js"
import { DocsPageLive } from "./DocsPage.js"
import { ConsoleRoutesLive } from "../console/ConsoleRoutes.js"
import { drainingServerLayer } from "./DrainingServer.js"
import { ErrorMappingLive } from "./ErrorMapping.js"
import { embeddedDatabase, withDefaultFrom } from "../../layers/lib/ConfigValues.js"
import { currentExchange, httpExchange, requestIdOf } from "../../layers/lib/RequestIds.js"
import { apiFront } from "./ApiFront.js"

const HealthLive = HttpApiBuilder.Router.use((router) =>
  router.get("/health", HttpServerResponse.unsafeJson({ status: "ok" }))
)

export const ApiLive = HttpApiBuilder.api(GatewayApi).pipe(
  Layer.provide([InferenceLive, AdminLive, PlatformsLive, ApiKeysLive, EndUsersLive, BudgetsLive, WebhooksLive, ToolsLive, CapabilitiesLive, ErrorMappingLive]),
  Layer.provide(AuthenticationLive)
)

/** HttpApi's requests run in their exchange (x-request-id, Server-Timing), as the chat route's do. */
const inExchange = <E, R>(app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>) =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
    Effect.locally(app, currentExchange, httpExchange(requestIdOf(request.headers["x-request-id"]))))

export const HttpAppLive = HttpApiBuilder.serve(inExchange).pipe(
  // The viewer's script is served from the installed package, read per request (docs/decisions.md).
  Layer.provide(DocsPageLive),
  // The web console's page and assets, read from dist/console per request (src/console/ConsoleRoutes.ts).
  Layer.provide(ConsoleRoutesLive),
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
  }, apiFront))
)
