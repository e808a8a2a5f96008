// The whole program as one layer: database (embedded or DATABASE_URL) -> services -> listeners.
import { Effect, Layer } from "effect"
import { AdminKey } from "../layers/AdminKey.js"
import { AdmissionCache } from "../layers/AdmissionCache.js"
import { ApiKeys } from "../layers/ApiKeys.js"
import { BudgetLedger } from "../layers/BudgetLedger.js"
import { Capabilities } from "../layers/Capabilities.js"
import { Crypto } from "../layers/Crypto.js"
import { DatabaseLive } from "../layers/Database.js"
import { DisplayLedger } from "../layers/DisplayLedger.js"
import { DatabaseUrlLive } from "../layers/EmbeddedPostgres.js"
import { EndUsers } from "../layers/EndUsers.js"
import { Idempotency } from "../layers/Idempotency.js"
import { Inference } from "../layers/Inference.js"
import { InferenceLogs } from "../layers/InferenceLogs.js"
import { KeyAuth } from "../layers/KeyAuth.js"
import { ModelCatalog } from "../layers/ModelCatalog.js"
import { PlatformWallet } from "../layers/PlatformWallet.js"
import { Platforms } from "../layers/Platforms.js"
import { ProviderKeys } from "../layers/ProviderKeys.js"
import { ProviderRouter } from "../layers/ProviderRouter.js"
import { Responses } from "../layers/Responses.js"
import { RateLimiter } from "../layers/RateLimiter.js"
import { RateLimitSettings } from "../layers/RateLimitSettings.js"
import { Settlements } from "../layers/Settlements.js"
import { Skills } from "../layers/Skills.js"
import { ToolHost } from "../layers/ToolHost.js"
import { UpstreamAdapters } from "../layers/upstream/Adapters.js"
import { WebhookOutbox } from "../layers/WebhookOutbox.js"
import { ApiListenerLive } from "./http/Server.js"
import { Listeners } from "./Listeners.js"
import { ToolListenerLive } from "./tools/Server.js"
import { SharedSchedulerLive } from "./lib/SharedScheduler.js"
import { TracingLive } from "./Tracing.js"

export type Role = "all" | "api" | "tools"

/** Domain services over a SqlClient; tests swap pieces of this. */
export const ServicesLive = Layer.mergeAll(Platforms.Default, EndUsers.Default, Responses.Default).pipe(
  Layer.provideMerge(Layer.mergeAll(Inference.Default, ToolHost.Default)),
  Layer.provideMerge(Layer.mergeAll(DisplayLedger.Default, Skills.Default, Capabilities.Default)),
  Layer.provideMerge(Layer.mergeAll(ProviderRouter.Default, RateLimiter.layerFromConfig, UpstreamAdapters.layer, RateLimitSettings.Default, Settlements.Default, AdmissionCache.Default)),
  Layer.provideMerge(Layer.mergeAll(ApiKeys.Default, BudgetLedger.Default, Idempotency.Default)),
  Layer.provideMerge(Layer.mergeAll(ModelCatalog.Default, ProviderKeys.Default, PlatformWallet.Default, InferenceLogs.Default)),
  Layer.provideMerge(Layer.mergeAll(KeyAuth.Default, WebhookOutbox.Default)),
  Layer.provideMerge(Layer.mergeAll(AdminKey.layer, Crypto.Default))
)

/** Infrastructure: database client with migrations applied. */
export const InfraLive = DatabaseLive.pipe(Layer.provideMerge(DatabaseUrlLive))

const listenersFor = (role: Role) =>
  role === "api" ? ApiListenerLive : role === "tools" ? ToolListenerLive : Layer.mergeAll(ApiListenerLive, ToolListenerLive)

/** GATEWAY_CONFIG (providers, models, pricing) is applied before the listeners open. */
const ConfigFileLive = Layer.effectDiscard(Effect.flatMap(ModelCatalog, (catalog) => catalog.applyConfigFile))

/** Everything below the listeners, exposed so startup tasks (demo seed, report) can use it. */
export const CoreLive = ConfigFileLive.pipe(
  Layer.provideMerge(ServicesLive),
  Layer.provideMerge(Listeners.Default),
  Layer.provideMerge(InfraLive)
)

/** The program; tests pass their own tracing layer (an in-memory exporter). */
export const appLayer = (role: Role, tracing: Layer.Layer<never, unknown> = TracingLive) =>
  listenersFor(role).pipe(Layer.provideMerge(CoreLive), Layer.provide(tracing), Layer.provide(SharedSchedulerLive))
