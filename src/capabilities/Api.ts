// Capabilities catalog endpoints. SKELETON: being implemented.
import { HttpApiGroup } from "@effect/platform"
import { Authentication } from "../http/Authentication.js"

export class CapabilitiesGroup extends HttpApiGroup.make("capabilities").middleware(Authentication).prefix("/v1") {}
