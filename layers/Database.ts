// The Postgres client (@effect/sql-pg) and the migrations that run before anything uses it.
import { NodeContext } from "@effect/platform-node"
import { PgClient, PgMigrator } from "@effect/sql-pg"
import { Config, Effect, Layer } from "effect"
import { migrations } from "../migrations/index.js"
import { DatabaseUrl } from "./EmbeddedPostgres.js"

const ClientLive = Layer.unwrapEffect(
  Effect.gen(function*() {
    const url = yield* DatabaseUrl
    const maxConnections = yield* Config.integer("DATABASE_POOL_SIZE").pipe(Config.withDefault(20))
    return PgClient.layer({ url, maxConnections, applicationName: "model-gateway" })
  })
)

const MigratorLive = PgMigrator.layer({ loader: migrations, table: "schema_migrations" }).pipe(
  Layer.provide(NodeContext.layer)
)

/** SqlClient + PgClient, with every migration applied first. */
export const DatabaseLive = MigratorLive.pipe(Layer.provideMerge(ClientLive))
