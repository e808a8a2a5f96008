// The whole program as one layer: database (embedded or DATABASE_URL) -> services -> listeners.
import { Effect, Layer } from "effect"
import { AdminKey } from "../layers/access/AdminKey.js"
import { AdmissionCache } from "../layers/pipeline/AdmissionCache.js"
import { ApiKeys } from "../layers/tenancy/ApiKeys.js"
import { BudgetLedger } from "../layers/ledger/BudgetLedger.js"
import { Capabilities } from "../layers/capabilities/Capabilities.js"
import { DatabaseLive } from "../layers/platform/Database.js"
import { DisplayLedger } from "../layers/ledger/DisplayLedger.js"
import { DatabaseUrlLive } from "../layers/platform/EmbeddedPostgres.js"
import { Embeddings } from "../layers/pipeline/Embeddings.js"
import { EndUsers } from "../layers/tenancy/EndUsers.js"
import { Idempotency } from "../layers/platform/Idempotency.js"
import { Inference } from "../layers/pipeline/Inference.js"
import { InferenceLogs } from "../layers/ledger/InferenceLogs.js"
import { KeyAuth } from "../layers/access/KeyAuth.js"
import { Messages } from "../layers/pipeline/Messages.js"
import { ModelCatalog } from "../layers/tenancy/ModelCatalog.js"
import { PlatformWallet } from "../layers/ledger/PlatformWallet.js"
import { Platforms } from "../layers/tenancy/Platforms.js"
import { ProviderKeys } from "../layers/tenancy/ProviderKeys.js"
import { Reservations } from "../layers/ledger/Reservations.js"
import { Responses } from "../layers/responses/Responses.js"
import { RateLimitSettings } from "../layers/tenancy/RateLimitSettings.js"
import { Settlements } from "../layers/ledger/Settlements.js"
import { Usage } from "../layers/ledger/Usage.js"
import { ToolHost } from "../layers/tools/ToolHost.js"
import { ApiListenerLive } from "./http/Server.js"
import { Listeners } from "../layers/platform/Listeners.js"
import { ToolListenerLive } from "./tools/Server.js"
import { SharedSchedulerLive } from "../layers/lib/SharedScheduler.js"
import { TracingLive } from "./Tracing.js"

export type Role = "all" | "api" | "tools"

/**
 * The services the HTTP handlers, the listeners and the startup tasks use. Each `.Default` brings
 * the services it depends on (its `dependencies`); a layer is built once per app however many
 * services name it, since layers are memoized by reference within one build. What is left to
 * provide is infrastructure: the SqlClient and configuration.
 */
export const ServicesLive = Layer.mergeAll(
  AdminKey.layer,
  AdmissionCache.Default,
  ApiKeys.Default,
  BudgetLedger.Default,
  Capabilities.Default,
  DisplayLedger.Default,
  Embeddings.Default,
  EndUsers.Default,
  Idempotency.Default,
  Inference.Default,
  InferenceLogs.Default,
  KeyAuth.Default,
  Listeners.Default,
  Messages.Default,
  ModelCatalog.Default,
  PlatformWallet.Default,
  Platforms.Default,
  ProviderKeys.Default,
  RateLimitSettings.Default,
  Reservations.Default,
  Responses.Default,
  Settlements.Default,
  ToolHost.Default,
  Usage.Default
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
  Layer.provideMerge(InfraLive)
)

/** The program; tests pass their own tracing layer (an in-memory exporter). */
export const appLayer = (role: Role, tracing: Layer.Layer<never, unknown> = TracingLive) =>
  listenersFor(role).pipe(Layer.provideMerge(CoreLive), Layer.provide(tracing), Layer.provide(SharedSchedulerLive))
