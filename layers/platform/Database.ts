// The Postgres client (@effect/sql-pg) over a pool we own (so its usage can be exported as
// metrics), and the migrations that run before anything uses it.
import { NodeContext } from "@effect/platform-node"
import { SqlError } from "@effect/sql/SqlError"
import { PgClient, PgMigrator } from "@effect/sql-pg"
import { Clock, Config, Effect, Layer, Metric, Redacted, Schedule } from "effect"
import pg from "pg"
import { migrations } from "../../migrations/index.js"
import { DatabaseUrl } from "./EmbeddedPostgres.js"
import { dbPoolConnections, dbPoolMax, dbPoolPending } from "./Metrics.js"

const APPLICATION_NAME = "model-gateway"
const POOL_SAMPLE_INTERVAL = "1 second"

const withPoolName = <A extends Metric.Metric.Gauge<number>>(gauge: A) =>
  Metric.tagged(gauge, "db.client.connection.pool.name", APPLICATION_NAME)
const usedConnections = Metric.tagged(withPoolName(dbPoolConnections), "db.client.connection.state", "used")
const idleConnections = Metric.tagged(withPoolName(dbPoolConnections), "db.client.connection.state", "idle")
const maxConnectionsGauge = withPoolName(dbPoolMax)
const pendingRequests = withPoolName(dbPoolPending)

/**
 * Copies the pool's counters into the gauges every second, for the scope's lifetime. The
 * dedicated LISTEN connection of @effect/sql-pg is not a pool connection and is not counted.
 */
const samplePool = (pool: pg.Pool) =>
  Effect.suspend(() =>
    Effect.all([
      Metric.set(usedConnections, pool.totalCount - pool.idleCount),
      Metric.set(idleConnections, pool.idleCount),
      Metric.set(pendingRequests, pool.waitingCount)
    ], { discard: true })
  ).pipe(
    Effect.repeat(Schedule.spaced(POOL_SAMPLE_INTERVAL)),
    // Real time even under a TestClock (a clock jump of years would replay the schedule).
    Effect.withClock(Clock.make()),
    Effect.interruptible
  )

/**
 * The pool as `PgClient.make` would build it from `{ url, maxConnections, applicationName }`
 * (same options, same error handler, same "SELECT 1" check at start, ended with the layer), but
 * created here because @effect/sql-pg does not expose the pool it creates.
 */
const acquirePool = (url: Redacted.Redacted<string>, max: number) =>
  Effect.gen(function*() {
    const pool = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const pool = new pg.Pool({ connectionString: Redacted.value(url), max, application_name: APPLICATION_NAME })
        // Errors of idle clients (a Postgres restart) would otherwise crash the process; the
        // next checkout reconnects.
        pool.on("error", () => {})
        return pool
      }),
      (pool) => Effect.promise(() => pool.end()).pipe(Effect.interruptible, Effect.timeoutOption(1000))
    )
    yield* Effect.tryPromise({
      try: () => pool.query("SELECT 1"),
      catch: (cause) => new SqlError({ cause, message: "PgClient: Failed to connect" })
    }).pipe(Effect.timeoutFail({
      duration: "5 seconds",
      onTimeout: () => new SqlError({ cause: new Error("Connection timed out"), message: "PgClient: Connection timed out" })
    }))
    yield* Metric.set(maxConnectionsGauge, max)
    yield* Effect.forkScoped(samplePool(pool)) // interrupted before the pool ends (reverse order)
    return pool
  })

const ClientLive = Layer.unwrapEffect(
  Effect.gen(function*() {
    const url = yield* DatabaseUrl
    const maxConnections = yield* Config.integer("DATABASE_POOL_SIZE").pipe(Config.withDefault(20))
    return PgClient.layerFromPool({ acquire: acquirePool(url, maxConnections), applicationName: APPLICATION_NAME })
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
