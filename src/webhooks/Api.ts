// Webhook endpoint management (DESIGN.md section 4). SKELETON: being implemented.
import { HttpApiGroup } from "@effect/platform"
import { Authentication } from "../http/Authentication.js"

export class WebhooksGroup extends HttpApiGroup.make("webhooks").middleware(Authentication).prefix("/v1") {}
