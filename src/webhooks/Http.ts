// Handlers of webhook endpoint management: thin, each checks the caller's platform first.
// The group brings its own WebhookEndpoints service (it needs only PgClient and Crypto).
import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer } from "effect"
import { WebhookEndpoints } from "../../layers/ledger/WebhookOutbox.js"
import { requirePlatform } from "../http/Access.js"
import { GatewayApi } from "../http/Api.js"

export const WebhooksLive = HttpApiBuilder.group(GatewayApi, "webhooks", (handlers) =>
  Effect.gen(function*() {
    const endpoints = yield* WebhookEndpoints
    return handlers
      .handle("createWebhookEndpoint", ({ path, payload }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(endpoints.createEndpoint(path.platformId, payload))))
      .handle("listWebhookEndpoints", ({ path, urlParams }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(endpoints.listEndpoints(path.platformId, urlParams))))
      .handle("getWebhookEndpoint", ({ path }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(endpoints.getEndpoint(path.platformId, path.endpointId))))
      .handle("deleteWebhookEndpoint", ({ path }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(endpoints.deleteEndpoint(path.platformId, path.endpointId))))
      .handle("listWebhookDeliveries", ({ path, urlParams }) =>
        requirePlatform(path.platformId).pipe(
          Effect.zipRight(endpoints.listDeliveries(path.platformId, path.endpointId, urlParams))
        ))
      .handle("listWebhookDeliveryAttempts", ({ path, urlParams }) =>
        requirePlatform(path.platformId).pipe(
          Effect.zipRight(endpoints.listAttempts(path.platformId, path.endpointId, path.deliveryId, urlParams))
        ))
  })).pipe(Layer.provide(WebhookEndpoints.Default))
