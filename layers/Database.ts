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

/** Any constant shared by every instance: they take turns migrating. */
const MIGRATION_LOCK = 7_213_381_245

/**
 * Migrations under a session advisory lock: instances starting together on an empty database
 * would otherwise race on creating the migrator's own table (a Postgres catalog unique
 * violation) before its table lock can serialise them.
 */
const MigratorLive = Layer.effectDiscard(
  Effect.scoped(Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const connection = yield* sql.reserve
    yield* Effect.acquireRelease(
      connection.executeUnprepared(`SELECT pg_advisory_lock(${MIGRATION_LOCK})`, [], undefined),
      () => connection.executeUnprepared(`SELECT pg_advisory_unlock(${MIGRATION_LOCK})`, [], undefined).pipe(Effect.ignore)
    )
    yield* PgMigrator.run({ loader: migrations, table: "schema_migrations" })
  })) // the scope ends here: the lock and the connection go back at once
).pipe(Layer.provide(NodeContext.layer)) // needed for the migrator's optional pg_dump, even unused

/** SqlClient + PgClient, with every migration applied first. */
export const DatabaseLive = MigratorLive.pipe(Layer.provideMerge(ClientLive))
