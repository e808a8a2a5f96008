// Webhook endpoint management (docs/api.md, "Webhooks"): register, list, read, delete endpoints and
// inspect their deliveries. Platform keys only, own platform only.
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema } from "@effect/platform"
import { Schema } from "effect"
import { Paginated, PathId } from "../../schemas/Common.js"
import { Conflict } from "../../schemas/Errors.js"
import {
  CreateWebhookEndpoint,
  ListWebhooksParams,
  WebhookDelivery,
  WebhookDeliveryAttempt,
  WebhookEndpoint,
  WebhookEndpointCreated
} from "../../schemas/Webhooks.js"
import { Authentication } from "../http/Authentication.js"

const PlatformPath = Schema.Struct({ platformId: PathId })
const EndpointPath = Schema.Struct({ platformId: PathId, endpointId: PathId })
const DeliveryPath = Schema.Struct({ platformId: PathId, endpointId: PathId, deliveryId: PathId })

export class WebhooksGroup extends HttpApiGroup.make("webhooks")
  .add(
    HttpApiEndpoint.post("createWebhookEndpoint", "/platforms/:platformId/webhook-endpoints")
      .setPath(PlatformPath)
      .setPayload(CreateWebhookEndpoint)
      .addSuccess(WebhookEndpointCreated, { status: 201 })
      .addError(Conflict.Http) // the platform has GATEWAY_WEBHOOK_MAX_ENDPOINTS endpoints already
  )
  .add(
    HttpApiEndpoint.get("listWebhookEndpoints", "/platforms/:platformId/webhook-endpoints")
      .setPath(PlatformPath)
      .setUrlParams(ListWebhooksParams)
      .addSuccess(Paginated(WebhookEndpoint))
  )
  .add(
    HttpApiEndpoint.get("getWebhookEndpoint", "/platforms/:platformId/webhook-endpoints/:endpointId")
      .setPath(EndpointPath)
      .addSuccess(WebhookEndpoint)
  )
  .add(
    HttpApiEndpoint.del("deleteWebhookEndpoint", "/platforms/:platformId/webhook-endpoints/:endpointId")
      .setPath(EndpointPath)
      .addSuccess(HttpApiSchema.NoContent)
  )
  .add(
    HttpApiEndpoint.get("listWebhookDeliveries", "/platforms/:platformId/webhook-endpoints/:endpointId/deliveries")
      .setPath(EndpointPath)
      .setUrlParams(ListWebhooksParams)
      .addSuccess(Paginated(WebhookDelivery))
  )
  .add(
    HttpApiEndpoint.get(
      "listWebhookDeliveryAttempts",
      "/platforms/:platformId/webhook-endpoints/:endpointId/deliveries/:deliveryId/attempts"
    )
      .setPath(DeliveryPath)
      .setUrlParams(ListWebhooksParams)
      .addSuccess(Paginated(WebhookDeliveryAttempt))
  )
  .middleware(Authentication)
  .prefix("/v1") {}
