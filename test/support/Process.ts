// A gateway as a real child process (`node --import tsx src/main.ts`, or the bundle `npm start`
// runs, `node dist/main.js`, built by the global setup), for tests that need separate processes
// (own memory, own caches, own pools) on one database. The child binds free ports (PORT=0,
// MCP_PORT=0) and prints "API listening on ..." / "Tool service listening on ..."; we parse those.
// Children are stopped with SIGTERM (SIGKILL after a grace period) and, as a last resort, killed
// when the test process exits.
import { type ChildProcess, spawn } from "node:child_process"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { type ApiResponse, callerFor, type CallOptions } from "./Gateway.js"

const ROOT = fileURLToPath(new URL("../..", import.meta.url))

export interface SpawnOptions {
  /** Shown in error messages. */
  readonly label: string
  /** Merged over this process's environment; a value of `undefined` removes the variable. */
  readonly env: Record<string, string | undefined>
  readonly role?: "all" | "api" | "tools"
  /** `source` (default): the TypeScript sources through tsx; `bundle`: dist/main.js. */
  readonly entry?: "source" | "bundle"
  readonly startTimeoutMs?: number
  /** The working directory (default: the checkout); the entry is found in the checkout either way. */
  readonly cwd?: string
  /** Its own process group, as a shell starts a command: `signalGroup` then acts like Ctrl-C in a terminal. */
  readonly ownGroup?: boolean
}

export interface GatewayProcess {
  readonly label: string
  readonly pid: number
  /** The API host; "" with `--role tools`. */
  readonly baseUrl: string
  /** Undefined with `--role api`. */
  readonly toolsUrl: string | undefined
  /** The child's recent output (stdout and stderr), for diagnostics. */
  readonly lines: ReadonlyArray<string>
  readonly call: <T = any>(method: string, path: string, options?: CallOptions) => Promise<ApiResponse<T>>
  /** SIGTERM, then SIGKILL after `graceMs`; resolves once the process has exited. */
  readonly stop: (graceMs?: number) => Promise<void>
  /** Sends one signal, nothing more. */
  readonly signal: (signal: NodeJS.Signals) => void
  /** Sends one signal to the process group (with `ownGroup`): a terminal's Ctrl-C is SIGINT to the group. */
  readonly signalGroup: (signal: NodeJS.Signals) => void
  /** How the process ended (exit code, or the signal that killed it). */
  readonly exited: Promise<ProcessExit>
  /** Resolves with the first output line matching `pattern`; fails after `timeoutMs`. */
  readonly waitForLine: (pattern: RegExp, timeoutMs?: number) => Promise<string>
}

export interface ProcessExit {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
}

const live = new Set<ChildProcess>()
let exitHookInstalled = false
const installExitHook = () => {
  if (exitHookInstalled) return
  exitHookInstalled = true
  // Synchronous last resort: no gateway outlives the test worker, even on a crash.
  process.on("exit", () => {
    for (const child of live) child.kill("SIGKILL")
  })
}

const stopProcess = (child: ChildProcess, graceMs: number) =>
  new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) {
      live.delete(child)
      return resolve()
    }
    const force = setTimeout(() => child.kill("SIGKILL"), graceMs)
    child.once("exit", () => {
      clearTimeout(force)
      live.delete(child)
      resolve()
    })
    child.kill("SIGTERM")
  })

/**
 * The environment of a spawned gateway on `databaseUrl` and its own `dataDir`: ephemeral ports on
 * loopback, no demo seed, the fakes' loopback URLs allowed, no Redis and no tracing unless
 * `extra` says otherwise.
 */
export const spawnEnv = (
  options: { readonly databaseUrl: string; readonly dataDir: string; readonly adminKey: string; readonly encryptionKey: string },
  extra: Record<string, string | undefined> = {}
): Record<string, string | undefined> => ({
  DATABASE_URL: options.databaseUrl,
  REDIS_URL: undefined,
  OTEL_EXPORTER_OTLP_ENDPOINT: undefined,
  PORT: "0",
  MCP_PORT: "0",
  HOST: "127.0.0.1",
  GATEWAY_ADMIN_KEY: options.adminKey,
  GATEWAY_ENCRYPTION_KEY: options.encryptionKey,
  GATEWAY_DATA_DIR: options.dataDir,
  GATEWAY_DEMO: "false",
  GATEWAY_ALLOW_PRIVATE_URLS: "true",
  ...extra
})

/**
 * Runs `node <entry>` in `cwd` (default: the checkout, the bundle) until it exits on its own, for
 * starts that must fail; SIGKILL after `timeoutMs`. Resolves with how it ended and its output.
 */
export const runToExit = (options: {
  readonly env: Record<string, string | undefined>
  readonly cwd?: string
  readonly entry?: string
  readonly timeoutMs?: number
}): Promise<ProcessExit & { readonly output: string }> =>
  new Promise((resolve) => {
    installExitHook()
    const env: Record<string, string> = {}
    for (const [name, value] of Object.entries({ ...process.env, ...options.env })) {
      if (value !== undefined) env[name] = value
    }
    const child = spawn(process.execPath, [options.entry ?? "dist/main.js"], { cwd: options.cwd ?? ROOT, env, stdio: ["ignore", "pipe", "pipe"] })
    live.add(child)
    let output = ""
    child.stdout.setEncoding("utf8").on("data", (text: string) => (output += text))
    child.stderr.setEncoding("utf8").on("data", (text: string) => (output += text))
    const kill = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 60_000)
    child.once("close", (code, signal) => {
      clearTimeout(kill)
      live.delete(child)
      resolve({ code, signal, output })
    })
  })

/** Starts the gateway in a child process and waits until its listeners are up. */
export const spawnGateway = async (options: SpawnOptions): Promise<GatewayProcess> => {
  installExitHook()
  const env: Record<string, string> = {}
  for (const [name, value] of Object.entries({ ...process.env, ...options.env })) {
    if (value !== undefined) env[name] = value
  }
  const role = options.role ?? "all"
  const entry = options.entry === "bundle" ? [join(ROOT, "dist/main.js")] : ["--import", "tsx", join(ROOT, "src/main.ts")]
  const child = spawn(process.execPath, [...entry, "--role", role], {
    cwd: options.cwd ?? ROOT,
    env,
    stdio: ["ignore", "pipe", "pipe"],
    detached: options.ownGroup === true
  })
  live.add(child)
  const lines: Array<string> = []
  const collect = (stream: NodeJS.ReadableStream | null) => {
    let pending = ""
    stream?.setEncoding("utf8")
    stream?.on("data", (text: string) => {
      pending += text
      const parts = pending.split("\n")
      pending = parts.pop() ?? ""
      for (const line of parts) {
        lines.push(line)
        if (lines.length > 2000) lines.splice(0, 1000)
      }
    })
  }
  collect(child.stdout)
  collect(child.stderr)
  const exited = new Promise<ProcessExit>((resolve) =>
    child.once("exit", (code, signal) => {
      live.delete(child)
      resolve({ code, signal })
    })
  )
  const waitForLine = (pattern: RegExp, timeoutMs = 10_000) =>
    new Promise<string>((resolve, reject) => {
      const started = Date.now()
      const poll = setInterval(() => {
        const line = lines.find((l) => pattern.test(l))
        if (line !== undefined || Date.now() - started > timeoutMs) {
          clearInterval(poll)
          if (line !== undefined) resolve(line)
          else reject(new Error(`${options.label}: no line matching ${pattern} within ${timeoutMs} ms:\n${tail()}`))
        }
      }, 10)
    })

  const tail = () => lines.slice(-40).join("\n")
  const find = (pattern: RegExp) => {
    for (const line of lines) {
      const match = line.match(pattern)
      const found = match?.[1] ?? match?.[2]
      if (found !== undefined) return found
    }
    return undefined
  }
  // "on http://HOST:PORT", or for a wildcard bind "on 0.0.0.0:PORT (all interfaces; base_url http://...,"
  const apiPattern = /API listening on (?:(http:\/\/\S+)|\S+ \(all interfaces; base_url (http:\/\/[^,\s]+))/
  const toolsPattern = /Tool service listening on (?:(http:\/\/\S+)|\S+ \(all interfaces; mcp_url (http:\/\/[^,\s)]+))/
  const timeoutMs = options.startTimeoutMs ?? 60_000
  try {
    await new Promise<void>((resolve, reject) => {
      const ready = () =>
        (role === "tools" || find(apiPattern) !== undefined) && (role === "api" || find(toolsPattern) !== undefined)
      const timer = setInterval(() => {
        if (ready()) return finish(resolve)
        if (child.exitCode !== null || child.signalCode !== null) {
          finish(() => reject(new Error(`${options.label} exited (${child.exitCode ?? child.signalCode}) before listening:\n${tail()}`)))
        }
      }, 25)
      const deadline = setTimeout(
        () => finish(() => reject(new Error(`${options.label}: not listening within ${timeoutMs} ms:\n${tail()}`))),
        timeoutMs
      )
      const finish = (then: () => void) => {
        clearInterval(timer)
        clearTimeout(deadline)
        then()
      }
    })
  } catch (e) {
    await stopProcess(child, 2_000)
    throw e
  }
  const baseUrl = find(apiPattern) ?? ""
  return {
    label: options.label,
    pid: child.pid!,
    baseUrl,
    toolsUrl: find(toolsPattern),
    lines,
    call: callerFor(baseUrl),
    stop: (graceMs = 10_000) => stopProcess(child, graceMs),
    signal: (signal) => {
      child.kill(signal)
    },
    signalGroup: (signal) => {
      process.kill(-child.pid!, signal)
    },
    exited,
    waitForLine
  }
}
