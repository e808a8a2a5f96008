// `npm run bench`: the performance targets of docs/performance.md. Mock upstream, reference proxy (and a node:http-only one) and gateway side by side under
// autocannon (JSON and SSE, 1/16/64/256 connections), stream TTFB, gateway RSS, then a ledger audit
// (one debit + one log row per successful call); prints Markdown and fills docs/performance.md.
import autocannon from "autocannon"
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { Agent, request } from "node:http"
import { availableParallelism, cpus, tmpdir, totalmem } from "node:os"
import { join } from "node:path"
import { performance } from "node:perf_hooks"
import { fileURLToPath } from "node:url"
import pg from "pg"

// ---------------------------------------------------------------------------------------------
// Knobs

const envNumber = (name: string, fallback: number) => {
  const raw = process.env[name]
  const value = raw === undefined || raw === "" ? fallback : Number(raw)
  if (!Number.isFinite(value) || value < 0) throw new Error(`${name} must be a non-negative number, got ${raw}`)
  return value
}

const DURATION = envNumber("BENCH_DURATION", 6)
const WARMUP = envNumber("BENCH_WARMUP", 2)
const TTFB_REQUESTS = Math.max(1, Math.floor(envNumber("BENCH_TTFB_REQUESTS", 200)))
const CONNECTIONS = (process.env.BENCH_CONNECTIONS ?? "1,16,64,256").split(",").map((s) => Number(s.trim()))
  .filter((n) => Number.isInteger(n) && n > 0)
const WRITE_DOC = process.env.BENCH_WRITE_DOC !== "0"
/**
 * Whole runs in a row, each with its own processes and database; more than one adds a table of
 * every target run by run and its median (the worst, for memory and correctness).
 */
const RUNS = Math.max(1, Math.floor(envNumber("BENCH_RUNS", 1)))
/** End users of the bench platform; the gateway's calls rotate over their keys (a platform's traffic comes from many). */
const END_USERS = Math.max(1, Math.floor(envNumber("BENCH_END_USERS", 1)))
/**
 * The throughput targets' steps (16 and 64 connections): the reference proxy and the gateway
 * take turns in this many slices each (proxy, gateway, gateway, proxy, ...; the step's length
 * split among them), so that both see the machine of the same minutes. 1: one step each.
 */
const PAIRED_SLICES = Math.max(1, Math.floor(envNumber("BENCH_PAIRED_SLICES", 4)))
const PAIRED_CONNECTIONS = [16, 64]
const ROOT = fileURLToPath(new URL("..", import.meta.url))
/** The node flags `npm start` runs the gateway with (package.json `config.node_flags`). */
const START_NODE_FLAGS: string = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).config?.node_flags ?? ""
/**
 * The gateway's node flags: npm start's, unless BENCH_GATEWAY_NODE_ARGS replaces them (empty:
 * none; a profile: "--max-semi-space-size=32 --cpu-prof --cpu-prof-dir=/tmp/prof").
 */
const GATEWAY_NODE_ARGS = (process.env.BENCH_GATEWAY_NODE_ARGS ?? START_NODE_FLAGS).split(" ").filter((a) => a !== "")
/** Extra node flags for the reference proxy (to profile both in one run). */
const PROXY_NODE_ARGS = (process.env.BENCH_PROXY_NODE_ARGS ?? "").split(" ").filter((a) => a !== "")
/** The gateway bundle to run (another build's, to compare two builds in turns). */
const GATEWAY_ENTRY = process.env.BENCH_GATEWAY_ENTRY || "dist/main.js"
const DOC = join(ROOT, "docs", "performance.md")

type Mode = "json" | "stream"
/** `proxy`: the targets' reference (node:http + undici); `http-proxy`: node:http on both sides, reported beside it. */
type TargetName = "direct" | "proxy" | "http-proxy" | "gateway"
const MODES: ReadonlyArray<Mode> = (["json", "stream"] as const).filter((m) => (process.env.BENCH_MODES ?? "json,stream").split(",").includes(m))
const ALL_TARGETS: ReadonlyArray<TargetName> = ["direct", "proxy", "http-proxy", "gateway"]
/** BENCH_TARGETS narrows the load steps (e.g. "gateway" while profiling); the report wants all four. */
const TARGETS = ALL_TARGETS.filter((t) => (process.env.BENCH_TARGETS ?? ALL_TARGETS.join(",")).split(",").includes(t))
const MODEL = "bench-model"
const PROVIDER = "bench-upstream"
const UPSTREAM_MODEL = "mock-model"

const log = (message: string) => process.stderr.write(`[bench] ${message}\n`)

// ---------------------------------------------------------------------------------------------
// Child processes: spawned with tsx, always killed on the way out.

interface Child {
  readonly label: string
  readonly process: ChildProcess
  readonly lines: Array<string>
  readonly counts: { error: number; warning: number }
  exited: boolean
}

const children: Array<Child> = []
const ERROR_LINE = /\b(ERROR|FATAL)\b|level=(ERROR|FATAL)/
const WARN_LINE = /\bWARN(ING)?\b|level=WARN/

/** Distinct error/warning entries of a child's recent output, each with its first `[cause]`, counted. */
const summarizeProblems = (lines: ReadonlyArray<string>) => {
  const counts = new Map<string, number>()
  lines.forEach((line, i) => {
    if (!ERROR_LINE.test(line) && !WARN_LINE.test(line)) return
    const message = line.replace(/^\[[^\]]*\]\s*/, "").replace(/\s*\(#\d+\)/, "").trim()
    let cause = ""
    for (let j = i + 1; j < Math.min(lines.length, i + 40); j++) {
      const next = lines[j] ?? ""
      if (ERROR_LINE.test(next) || WARN_LINE.test(next)) break
      const found = next.match(/\[cause\]:\s*(.*)/)
      if (found?.[1] !== undefined) {
        cause = found[1].trim()
        break
      }
    }
    const key = cause === "" ? message : `${message} <- ${cause}`
    counts.set(key, (counts.get(key) ?? 0) + 1)
  })
  return [...counts].map(([entry, n]) => `${n} x ${entry}`)
}

const spawnNode = (label: string, script: string, env: Record<string, string>, nodeArgs: ReadonlyArray<string> = []): Child => {
  // The gateway runs as in production: the bundle `npm run build` wrote (npm run bench builds it).
  const loader = script.endsWith(".js") ? [] : ["--import", "tsx"]
  const proc = spawn(process.execPath, [...nodeArgs, ...loader, script], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"]
  })
  const child: Child = { label, process: proc, lines: [], counts: { error: 0, warning: 0 }, exited: false }
  const collect = (stream: NodeJS.ReadableStream | null) => {
    let pending = ""
    stream?.setEncoding("utf8")
    stream?.on("data", (text: string) => {
      pending += text
      const parts = pending.split("\n")
      pending = parts.pop() ?? ""
      for (const line of parts) {
        if (ERROR_LINE.test(line)) child.counts.error++
        else if (WARN_LINE.test(line)) child.counts.warning++
        child.lines.push(line)
        if (child.lines.length > 400) child.lines.splice(0, 200)
        if (process.env.BENCH_VERBOSE === "1") process.stderr.write(`[${label}] ${line}\n`)
      }
    })
  }
  collect(proc.stdout)
  collect(proc.stderr)
  proc.on("exit", () => {
    child.exited = true
  })
  children.push(child)
  return child
}

/** Resolves with the first output line matching `pattern`; fails on exit or timeout. */
const waitForLine = (child: Child, pattern: RegExp, timeoutMs: number) =>
  new Promise<RegExpMatchArray>((resolve, reject) => {
    let seen = 0
    const check = () => {
      for (; seen < child.lines.length; seen++) {
        const match = child.lines[seen]?.match(pattern)
        if (match) {
          finish()
          resolve(match)
          return
        }
      }
      if (child.exited) {
        finish()
        reject(new Error(`${child.label} exited before printing ${pattern}:\n${child.lines.slice(-30).join("\n")}`))
      }
    }
    const timer = setInterval(check, 50)
    const deadline = setTimeout(() => {
      finish()
      reject(new Error(`${child.label}: no ${pattern} within ${timeoutMs} ms:\n${child.lines.slice(-30).join("\n")}`))
    }, timeoutMs)
    const finish = () => {
      clearInterval(timer)
      clearTimeout(deadline)
    }
  })

const stopChild = (child: Child, graceMs: number) =>
  new Promise<void>((resolve) => {
    if (child.exited || child.process.exitCode !== null) return resolve()
    const force = setTimeout(() => child.process.kill("SIGKILL"), graceMs)
    child.process.once("exit", () => {
      clearTimeout(force)
      resolve()
    })
    child.process.kill("SIGTERM")
  })

// Last resort (synchronous): nothing outlives the bench, even on an uncaught error.
process.on("exit", () => {
  for (const child of children) if (!child.exited) child.process.kill("SIGKILL")
})

// ---------------------------------------------------------------------------------------------
// Process sampling: RSS (VmRSS, VmHWM) every 200 ms, CPU time from /proc/<pid>/stat.

const readStatusKb = (pid: number, field: "VmRSS" | "VmHWM"): number | null => {
  try {
    const match = readFileSync(`/proc/${pid}/status`, "utf8").match(new RegExp(`${field}:\\s+(\\d+) kB`))
    return match?.[1] === undefined ? null : Number(match[1])
  } catch {
    if (field === "VmHWM") return null
    try {
      return Number(execFileSync("ps", ["-o", "rss=", "-p", String(pid)], { encoding: "utf8" }).trim()) || null
    } catch {
      return null
    }
  }
}

const TICKS = (() => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100
  } catch {
    return 100
  }
})()

const cpuSeconds = (pid: number): number | null => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    return (Number(fields[11]) + Number(fields[12])) / TICKS
  } catch {
    return null
  }
}

class Sampler {
  peakKb = 0
  windowPeakKb = 0
  private timer: NodeJS.Timeout | undefined
  constructor(readonly pid: number) {}
  start() {
    this.timer = setInterval(() => this.sample(), 200)
    this.timer.unref()
  }
  sample() {
    const kb = readStatusKb(this.pid, "VmRSS")
    if (kb === null) return
    this.peakKb = Math.max(this.peakKb, kb)
    this.windowPeakKb = Math.max(this.windowPeakKb, kb)
  }
  resetWindow() {
    this.windowPeakKb = 0
    this.sample()
  }
  stop() {
    if (this.timer) clearInterval(this.timer)
  }
}

// ---------------------------------------------------------------------------------------------
// Statistics

const percentile = (sorted: ArrayLike<number>, p: number): number => {
  if (sorted.length === 0) return Number.NaN
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))
  return sorted[index] ?? Number.NaN
}

class Samples {
  private values = new Float64Array(1024)
  length = 0
  push(value: number) {
    if (this.length === this.values.length) {
      const bigger = new Float64Array(this.values.length * 2)
      bigger.set(this.values)
      this.values = bigger
    }
    this.values[this.length++] = value
  }
  sorted() {
    return this.values.slice(0, this.length).sort()
  }
}

// ---------------------------------------------------------------------------------------------
// Requests

interface Target {
  readonly name: TargetName
  readonly base: string
  /** Bearer keys, used in turn. */
  readonly keys: ReadonlyArray<string>
}

const chatBody = (mode: Mode) =>
  JSON.stringify({
    model: MODEL,
    messages: [
      { role: "system", content: "You are a terse assistant." },
      { role: "user", content: "Say hello to the benchmark in one short sentence." }
    ],
    max_tokens: 64,
    ...(mode === "stream" ? { stream: true, stream_options: { include_usage: true } } : {})
  })

let keyTurn = 0
/** The headers of the target's next call: its keys in turn. */
const headersFor = (target: Target) => ({
  "content-type": "application/json",
  authorization: `Bearer ${target.keys[keyTurn++ % target.keys.length]}`
})

/** Gateway request ids from successful answers: the ledger audit checks each one. */
const gatewayIds = new Set<string>()
let gatewayOkWithoutId = 0

const ID_PATTERN = /"id":"(chatcmpl-[^"]+)"/

const complete = (mode: Mode, body: string) =>
  mode === "stream" ? body.trimEnd().endsWith("data: [DONE]") : body.includes("\"usage\"")

const noteAnswer = (target: Target, status: number, body: string) => {
  if (target.name !== "gateway" || status < 200 || status >= 300) return
  const id = body.match(ID_PATTERN)?.[1]
  if (id === undefined) gatewayOkWithoutId++
  else gatewayIds.add(id)
}

interface LoadResult {
  readonly mode: Mode
  readonly connections: number
  readonly target: TargetName
  readonly rps: number
  readonly p50: number
  readonly p99: number
  readonly ok: number
  readonly non2xx: number
  readonly errors: number
  readonly timeouts: number
  readonly incomplete: number
  readonly statuses: Record<string, number>
  /** The first non-2xx answer of the step (status and the start of its body), for the report. */
  readonly firstFailure: string | null
  /** The target's own process (the gateway, the reference proxy), when it is sampled. */
  readonly peakRssMb: number | null
  readonly cpuPct: number | null
  /** Seconds of load (autocannon's duration, which RPS divides by) and of wall clock (CPU's). */
  readonly seconds: number
  readonly wallSeconds: number
  /** Measured in alternating slices with the other target of its pair: each slice's RPS. */
  readonly sliceRps?: ReadonlyArray<number>
}

/** CPU time of the target's process per successful call, in microseconds (machine-speed independent, unlike RPS). */
const cpuPerCallUs = (l: LoadResult) => l.cpuPct === null || l.rps <= 0 ? null : (l.cpuPct / 100) * 1e6 / l.rps

const load = (target: Target, mode: Mode, connections: number, seconds: number, sampled: Sampler | null, latencies = new Samples()) =>
  new Promise<LoadResult>((resolve, reject) => {
    const statuses: Record<string, number> = {}
    let firstFailure: string | null = null
    let incomplete = 0
    sampled?.resetWindow()
    const cpuBefore = sampled === null ? null : cpuSeconds(sampled.pid)
    const startedAt = performance.now()
    const instance = autocannon(
      {
        url: `${target.base}/v1/chat/completions`,
        connections,
        duration: seconds,
        timeout: 30,
        requests: [{
          method: "POST",
          path: "/v1/chat/completions",
          headers: headersFor(target),
          body: chatBody(mode),
          ...(target.keys.length > 1 ? { setupRequest: (req: autocannon.Request) => ({ ...req, headers: headersFor(target) }) } : {}),
          onResponse: (status: number, body: string) => {
            statuses[status] = (statuses[status] ?? 0) + 1
            if ((status < 200 || status >= 300) && firstFailure === null) firstFailure = `${status} ${body.slice(0, 300)}`
            if (status >= 200 && status < 300 && !complete(mode, body)) incomplete++
            noteAnswer(target, status, body)
          }
        }]
      },
      (error: unknown, result: autocannon.Result) => {
        if (error) return reject(error)
        const wall = (performance.now() - startedAt) / 1000
        const cpuAfter = sampled === null ? null : cpuSeconds(sampled.pid)
        sampled?.sample()
        const sorted = latencies.sorted()
        const loaded = result.duration > 0 ? result.duration : wall
        resolve({
          mode,
          connections,
          target: target.name,
          rps: result["2xx"] / loaded,
          p50: percentile(sorted, 50),
          p99: percentile(sorted, 99),
          ok: result["2xx"],
          non2xx: result.non2xx,
          errors: result.errors,
          timeouts: result.timeouts,
          incomplete,
          statuses,
          firstFailure,
          peakRssMb: sampled === null ? null : sampled.windowPeakKb / 1024,
          cpuPct: cpuBefore === null || cpuAfter === null ? null : (100 * (cpuAfter - cpuBefore)) / wall,
          seconds: loaded,
          wallSeconds: wall
        })
      }
    )
    // autocannon's own histogram has 1 ms resolution; keep the exact float latencies instead.
    instance.on("response", (_client: autocannon.Client, status: number, _bytes: number, ms: number) => {
      if (status >= 200 && status < 300) latencies.push(ms)
    })
  })

/** Several slices' results of one target as one step: calls and seconds summed, latencies pooled. */
const mergeSlices = (slices: ReadonlyArray<LoadResult>): LoadResult => {
  const last = slices[slices.length - 1]!
  const sum = (f: (l: LoadResult) => number) => slices.reduce((n, l) => n + f(l), 0)
  const statuses: Record<string, number> = {}
  for (const l of slices) for (const [status, n] of Object.entries(l.statuses)) statuses[status] = (statuses[status] ?? 0) + n
  const wall = sum((l) => l.wallSeconds)
  const sampled = slices.every((l) => l.cpuPct !== null)
  return {
    ...last, // p50 and p99: the last slice's are over the pooled latencies of all of them
    rps: sum((l) => l.ok) / sum((l) => l.seconds),
    ok: sum((l) => l.ok),
    non2xx: sum((l) => l.non2xx),
    errors: sum((l) => l.errors),
    timeouts: sum((l) => l.timeouts),
    incomplete: sum((l) => l.incomplete),
    statuses,
    firstFailure: slices.find((l) => l.firstFailure !== null)?.firstFailure ?? null,
    peakRssMb: sampled ? Math.max(...slices.map((l) => l.peakRssMb ?? 0)) : null,
    cpuPct: sampled ? (100 * sum((l) => (l.cpuPct! / 100) * l.wallSeconds)) / wall : null,
    seconds: sum((l) => l.seconds),
    wallSeconds: wall,
    sliceRps: slices.map((l) => l.rps)
  }
}

/**
 * The reference proxy and the gateway in alternating slices (ABBA order, so a machine that
 * speeds up or slows down during the step favours neither). After each gateway slice the bench
 * waits for its settlements to be written, so that the gateway's writer and Postgres do not run
 * into the proxy's slice.
 */
const pairedLoad = async (
  proxy: { readonly target: Target; readonly sampler: Sampler },
  gateway: { readonly target: Target; readonly sampler: Sampler },
  mode: Mode,
  connections: number,
  seconds: number,
  settled: () => Promise<void>
): Promise<readonly [LoadResult, LoadResult]> => {
  const turns = { proxy: { ...proxy, latencies: new Samples(), results: [] as Array<LoadResult> }, gateway: { ...gateway, latencies: new Samples(), results: [] as Array<LoadResult> } }
  const slice = seconds / PAIRED_SLICES
  for (let i = 0; i < PAIRED_SLICES; i++) {
    const order = i % 2 === 0 ? (["proxy", "gateway"] as const) : (["gateway", "proxy"] as const)
    for (const name of order) {
      const turn = turns[name]
      turn.results.push(await load(turn.target, mode, connections, slice, turn.sampler, turn.latencies))
      if (name === "gateway") await settled()
    }
  }
  return [mergeSlices(turns.proxy.results), mergeSlices(turns.gateway.results)]
}

/**
 * Waits until the gateway's settlement writes stop: the log count read `stableReads` times more
 * unchanged, `intervalMs` apart, for at most `maxMs`. Returns the milliseconds waited.
 */
const logCountStill = async (client: pg.Client, stableReads: number, intervalMs: number, maxMs: number) => {
  const started = performance.now()
  let last = -1
  let stable = 0
  while (stable < stableReads && performance.now() - started < maxMs) {
    const n = Number((await client.query("SELECT count(*) AS n FROM inference_logs")).rows[0].n)
    stable = n === last ? stable + 1 : 0
    last = n
    await new Promise((r) => setTimeout(r, intervalMs))
  }
  return performance.now() - started
}

/** Between slices: the log count unchanged over 100 ms, at most 10 s. */
const settlementsWritten = (client: pg.Client) => async () => {
  await logCountStill(client, 2, 50, 10_000)
}

interface TtfbResult {
  readonly target: TargetName
  readonly p50: number
  readonly p99: number
  readonly totalP50: number
  readonly failures: number
}

/** One streaming request on `agent`: time to the first body chunk and to the end. */
const timedStream = (target: Target, agent: Agent) =>
  new Promise<{ status: number; first: number; total: number; text: string }>((resolve, reject) => {
    const url = new URL(`${target.base}/v1/chat/completions`)
    const t0 = performance.now()
    let firstAt = -1
    const parts: Array<Buffer> = []
    const req = request(
      { agent, host: url.hostname, port: url.port, path: url.pathname, method: "POST", headers: headersFor(target) },
      (res) => {
        res.on("data", (part: Buffer) => {
          if (firstAt < 0) firstAt = performance.now()
          parts.push(part)
        })
        res.on("end", () =>
          resolve({ status: res.statusCode ?? 0, first: firstAt - t0, total: performance.now() - t0, text: Buffer.concat(parts).toString("utf8") }))
        res.on("error", reject)
      }
    )
    req.on("error", reject)
    req.end(chatBody("stream"))
  })

/**
 * Sequential streaming requests, one keep-alive socket per target, round-robin across the
 * targets (so machine noise hits all of them alike): time to the first body byte.
 */
const ttfb = async (targets: ReadonlyArray<Target>, count: number): Promise<Array<TtfbResult>> => {
  const state = targets.map((target) => ({
    target,
    agent: new Agent({ keepAlive: true, maxSockets: 1 }),
    first: new Samples(),
    total: new Samples(),
    failures: 0
  }))
  for (let i = 0; i < count; i++) {
    for (const s of state) {
      const outcome = await timedStream(s.target, s.agent).catch(() => null)
      if (outcome === null || outcome.status !== 200 || !complete("stream", outcome.text)) {
        s.failures++
        continue
      }
      noteAnswer(s.target, outcome.status, outcome.text)
      s.first.push(outcome.first)
      s.total.push(outcome.total)
    }
  }
  return state.map((s) => {
    s.agent.destroy()
    const sortedFirst = s.first.sorted()
    return {
      target: s.target.name,
      p50: percentile(sortedFirst, 50),
      p99: percentile(sortedFirst, 99),
      totalP50: percentile(s.total.sorted(), 50),
      failures: s.failures
    }
  })
}

// ---------------------------------------------------------------------------------------------
// Gateway setup through its HTTP API

const api = async (base: string, key: string, method: string, path: string, body?: unknown) => {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: body === undefined ? null : JSON.stringify(body)
  })
  const text = await response.text()
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`)
  return (text === "" ? null : JSON.parse(text)) as any
}

const WALLET_TOPUP = "1000000"

const setUpGateway = async (base: string, adminKey: string, upstreamUrl: string) => {
  await api(base, adminKey, "POST", "/v1/admin/providers", { slug: PROVIDER, kind: "openai", base_url: `${upstreamUrl}/v1` })
  await api(base, adminKey, "POST", "/v1/admin/models", {
    slug: MODEL,
    providers: [{ provider: PROVIDER, provider_model_id: UPSTREAM_MODEL, input_usd_per_mtok: 1, output_usd_per_mtok: 2 }]
  })
  const platform = await api(base, adminKey, "POST", "/v1/admin/platforms", { name: "Bench" })
  const platformId = platform.platform.id as string
  const platformKey = platform.api_key.raw_key as string
  await api(base, platformKey, "PUT", `/v1/platforms/${platformId}/provider-keys/${PROVIDER}`, { api_key: "sk-bench-upstream-key" })
  await api(base, adminKey, "POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { amount_usd: Number(WALLET_TOPUP) })
  const endUserKeys: Array<string> = []
  for (let i = 0; i < END_USERS; i++) {
    const user = await api(base, platformKey, "POST", `/v1/platforms/${platformId}/end-users`, { external_id: `bench-user-${i}` })
    await api(base, platformKey, "POST", `/v1/platforms/${platformId}/end-users/${user.id}/budget`, { max_usd: 1_000_000 })
    endUserKeys.push(user.api_key.raw_key as string)
  }
  return { platformId, platformKey, endUserKeys }
}

// ---------------------------------------------------------------------------------------------
// Database: a fresh one on DATABASE_URL's server (dropped afterwards), else the gateway's embedded one.

const base62 = (length: number) => {
  const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
  let out = ""
  while (out.length < length) {
    for (const byte of randomBytes(length)) if (byte < 248 && out.length < length) out += alphabet[byte % 62]
  }
  return out
}

const withDatabase = (serverUrl: string, name: string) => {
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  return url.toString()
}

// ---------------------------------------------------------------------------------------------
// Ledger audit

interface Audit {
  readonly okCalls: number
  readonly okWithoutId: number
  readonly logRows: number
  readonly debitRows: number
  readonly lostLogs: number
  readonly doubleLogs: number
  readonly lostDebits: number
  readonly doubleDebits: number
  readonly walletDebitAnomalies: number
  readonly cutOff: number
  readonly cutOffAnomalies: number
  readonly cutOffStatuses: Record<string, number>
  readonly walletChange: string
  readonly logCostSum: string
  readonly debitSum: string
  readonly budgetUsed: string
  readonly walletMatches: boolean
  readonly budgetMatches: boolean
  readonly chainOk: boolean
  readonly settleWaitMs: number
  readonly upstreamCalls: number | null
}

const upstreamCallsFor = async (upstreamUrl: string, model: string) => {
  try {
    const stats = (await (await fetch(`${upstreamUrl}/stats`)).json()) as { served?: Record<string, number> }
    return stats.served?.[model] ?? 0
  } catch {
    return null
  }
}

const auditLedger = async (dbUrl: string, platformId: string, upstreamUrl: string): Promise<Audit> => {
  const client = new pg.Client({ connectionString: dbUrl })
  await client.connect()
  try {
    // Streams settle after their last byte: wait until the log count stops moving.
    const settleWaitMs = await logCountStill(client, 3, 500, 60_000)
    const rows = (await client.query(`
      WITH l AS (SELECT metadata->>'request_id' AS rid, count(*)::int AS n, max(status) AS status
                 FROM inference_logs WHERE platform_id = $1 GROUP BY 1),
           d AS (SELECT metadata->>'request_id' AS rid, count(*)::int AS n
                 FROM budget_transactions WHERE platform_id = $1 AND type = 'debit' GROUP BY 1),
           w AS (SELECT metadata->>'request_id' AS rid, count(*)::int AS n
                 FROM platform_wallet_transactions WHERE platform_id = $1 AND type = 'debit' GROUP BY 1)
      SELECT rid, coalesce(l.n, 0) AS logs, coalesce(d.n, 0) AS debits, coalesce(w.n, 0) AS wallet, l.status
      FROM l FULL JOIN d USING (rid) FULL JOIN w USING (rid)`, [platformId])).rows as Array<
        { rid: string | null; logs: number; debits: number; wallet: number; status: string | null }
      >
    const byId = new Map(rows.map((r) => [r.rid ?? "<null>", r]))
    let lostLogs = 0, doubleLogs = 0, lostDebits = 0, doubleDebits = 0, walletDebitAnomalies = 0
    for (const id of gatewayIds) {
      const row = byId.get(id)
      const logs = row?.logs ?? 0
      const debits = row?.debits ?? 0
      if (logs === 0) lostLogs++
      if (logs > 1) doubleLogs++
      if (debits === 0) lostDebits++
      if (debits > 1) doubleDebits++
      if ((row?.wallet ?? 0) !== 1) walletDebitAnomalies++
    }
    let cutOff = 0, cutOffAnomalies = 0
    const cutOffStatuses: Record<string, number> = {}
    for (const row of rows) {
      if (row.rid !== null && gatewayIds.has(row.rid)) continue
      cutOff++
      const status = row.status ?? "no log row"
      cutOffStatuses[status] = (cutOffStatuses[status] ?? 0) + 1
      if (row.logs !== 1 || row.debits !== 1 || row.wallet !== 1) cutOffAnomalies++
    }
    const totals = (await client.query(`
      SELECT (SELECT coalesce(sum(estimated_cost_usd), 0) FROM inference_logs WHERE platform_id = $1)::text AS log_cost,
             (SELECT coalesce(sum(amount_usd), 0) FROM budget_transactions WHERE platform_id = $1 AND type = 'debit')::text AS debit_sum,
             ($2::numeric - (SELECT balance_usd FROM platform_wallets WHERE platform_id = $1))::text AS wallet_change,
             (SELECT coalesce(sum(amount_usd), 0) FROM platform_wallet_transactions WHERE platform_id = $1 AND type = 'debit')::text AS wallet_debits,
             (SELECT sum(used_usd) FROM budgets WHERE platform_id = $1 AND deleted_at IS NULL)::text AS used,
             (SELECT count(*) FROM inference_logs WHERE platform_id = $1)::int AS log_rows,
             (SELECT count(*) FROM budget_transactions WHERE platform_id = $1 AND type = 'debit')::int AS debit_rows,
             (SELECT coalesce(sum(estimated_cost_usd), 0) = $2::numeric - (SELECT balance_usd FROM platform_wallets WHERE platform_id = $1)
                 FROM inference_logs WHERE platform_id = $1) AS wallet_ok,
             (SELECT coalesce(sum(amount_usd), 0) FROM platform_wallet_transactions WHERE platform_id = $1 AND type = 'debit')
                 = (SELECT coalesce(sum(estimated_cost_usd), 0) FROM inference_logs WHERE platform_id = $1) AS wallet_rows_ok,
             (SELECT sum(used_usd) FROM budgets WHERE platform_id = $1 AND deleted_at IS NULL)
                 = (SELECT coalesce(sum(amount_usd), 0) FROM budget_transactions WHERE platform_id = $1 AND type = 'debit') AS budget_ok`,
      [platformId, WALLET_TOPUP])).rows[0]
    const chain = (await client.query(`
      SELECT bool_and(b.used_usd = t.used_sum AND t.chained) AS ok
      FROM budgets b JOIN (
        SELECT budget_id, sum(used_usd_after - used_usd_before) AS used_sum,
               bool_and(used_usd_before = coalesce(prev_used, 0) AND max_usd_before = coalesce(prev_max, 0)) AS chained
        FROM (SELECT *, lag(used_usd_after) OVER w AS prev_used, lag(max_usd_after) OVER w AS prev_max
              FROM budget_transactions WINDOW w AS (PARTITION BY budget_id ORDER BY seq)) x
        GROUP BY budget_id) t ON t.budget_id = b.id
      WHERE b.platform_id = $1`, [platformId])).rows[0]
    return {
      okCalls: gatewayIds.size + gatewayOkWithoutId,
      okWithoutId: gatewayOkWithoutId,
      logRows: totals.log_rows,
      debitRows: totals.debit_rows,
      lostLogs,
      doubleLogs,
      lostDebits,
      doubleDebits,
      walletDebitAnomalies,
      cutOff,
      cutOffAnomalies,
      cutOffStatuses,
      walletChange: totals.wallet_change,
      logCostSum: totals.log_cost,
      debitSum: totals.debit_sum,
      budgetUsed: totals.used,
      walletMatches: totals.wallet_ok === true && totals.wallet_rows_ok === true,
      budgetMatches: totals.budget_ok === true,
      chainOk: chain?.ok === true,
      settleWaitMs,
      upstreamCalls: await upstreamCallsFor(upstreamUrl, UPSTREAM_MODEL)
    }
  } finally {
    await client.end()
  }
}

// ---------------------------------------------------------------------------------------------
// Report

const ms = (value: number) => (Number.isFinite(value) ? value.toFixed(2) : "n/a")
const signed = (value: number) => (Number.isFinite(value) ? `${value >= 0 ? "+" : ""}${value.toFixed(2)}` : "n/a")
const mb = (value: number | null) => (value === null ? "n/a" : value.toFixed(0))

interface Machine {
  readonly date: string
  readonly cpus: number
  readonly cpuModel: string
  readonly memGb: number
  readonly node: string
  readonly postgres: string
  readonly database: string
}

interface Report {
  readonly machine: Machine
  readonly loads: ReadonlyArray<LoadResult>
  readonly ttfbs: ReadonlyArray<TtfbResult>
  readonly audit: Audit
  readonly rss: { idleMb: number; peakMb: number; hwmMb: number | null; stream256Mb: number | null; proxyPeakMb: number }
  readonly gatewayLog: { errors: number; warnings: number; sample: ReadonlyArray<string> }
}

const findLoad = (loads: ReadonlyArray<LoadResult>, mode: Mode, connections: number, target: TargetName) =>
  loads.find((l) => l.mode === mode && l.connections === connections && l.target === target)

const verdict = (ok: boolean | null) => (ok === null ? "not measured" : ok ? "met" : "**missed**")

const percent = (s: number) => (Number.isFinite(s) ? `${(100 * s).toFixed(0)}%` : "n/a")

/** The gateway's latency minus the bare upstream's in the same step (NaN: not measured). */
const addedLatency = (loads: ReadonlyArray<LoadResult>, mode: Mode, connections: number, field: "p50" | "p99") => {
  const gw = findLoad(loads, mode, connections, "gateway")
  const direct = findLoad(loads, mode, connections, "direct")
  return gw && direct ? gw[field] - direct[field] : Number.NaN
}

/** The gateway's RPS over a reference's in the same step (NaN: not measured). */
const rpsShare = (loads: ReadonlyArray<LoadResult>, mode: Mode, connections: number, reference: TargetName = "proxy") => {
  const gw = findLoad(loads, mode, connections, "gateway")
  const proxy = findLoad(loads, mode, connections, reference)
  return gw && proxy && proxy.rps > 0 ? gw.rps / proxy.rps : Number.NaN
}

const gatewayFailures = (loads: ReadonlyArray<LoadResult>) =>
  loads.filter((l) => l.target === "gateway").reduce((n, l) => n + l.non2xx + l.errors + l.timeouts + l.incomplete, 0)

const ledgerFaults = (audit: Audit) => audit.lostDebits + audit.doubleDebits + audit.lostLogs + audit.doubleLogs

/**
 * One performance target (docs/performance.md): its figure in a run (NaN: not measured), how it reads, and
 * whether it is met. Over several runs the figures the machine's noise moves (latency,
 * throughput) are judged on their median; memory and correctness on the worst run.
 */
interface TargetCheck {
  readonly label: string
  readonly budget: string
  readonly figure: (report: Report) => number
  readonly show: (value: number) => string
  readonly ok: (value: number) => boolean
  /** Over several runs: the median, or the worst (the highest: each such target is a ceiling). */
  readonly across: "median" | "worst"
  /** The run's own wording, where the figure alone says less. */
  readonly detail?: (report: Report) => string
}

const TARGET_CHECKS: ReadonlyArray<TargetCheck> = [
  ...MODES.flatMap((mode) =>
    ([["p50", 1.0, "<= 1.0 ms"], ["p99", 5, "<= 5 ms"]] as const).map(([field, ceiling, budget]): TargetCheck => ({
      label: `unloaded added ${field}, ${mode} (1 conn)`,
      budget,
      figure: (r) => addedLatency(r.loads, mode, 1, field),
      show: (v) => `${signed(v)} ms`,
      ok: (v) => v <= ceiling,
      across: "median"
    }))
  ),
  ...MODES.flatMap((mode) =>
    [16, 64].map((c): TargetCheck => ({
      label: `throughput vs reference proxy, ${mode}, ${c} conns`,
      budget: ">= 40%",
      figure: (r) => rpsShare(r.loads, mode, c),
      show: percent,
      ok: (v) => v >= 0.4,
      across: "median"
    }))
  ),
  {
    label: "stream added TTFB p50 (1 conn)",
    budget: "<= 1.5 ms",
    figure: (r) => {
      const direct = r.ttfbs.find((t) => t.target === "direct")
      const gateway = r.ttfbs.find((t) => t.target === "gateway")
      return direct && gateway ? gateway.p50 - direct.p50 : Number.NaN
    },
    show: (v) => `${signed(v)} ms`,
    ok: (v) => v <= 1.5,
    across: "median"
  },
  {
    label: "gateway peak RSS at 256 streaming conns",
    budget: "<= 250 MB",
    figure: (r) => r.rss.stream256Mb ?? Number.NaN,
    show: (v) => `${mb(v)} MB`,
    ok: (v) => v <= 250,
    across: "worst"
  },
  {
    label: "lost or double debits / log rows",
    budget: "0",
    figure: (r) => ledgerFaults(r.audit),
    show: (v) => `${v}`,
    ok: (v) => v === 0,
    across: "worst",
    detail: ({ audit }) =>
      `${audit.lostDebits} lost, ${audit.doubleDebits} double debits; ${audit.lostLogs} lost, ${audit.doubleLogs} double logs`
  },
  {
    label: "non-2xx / errors under load (gateway)",
    budget: "0",
    figure: (r) => gatewayFailures(r.loads),
    show: (v) => `${v}`,
    ok: (v) => v === 0,
    across: "worst"
  }
]

/** A target's verdict on a figure (null: not measured). */
const judged = (check: TargetCheck, value: number) => (Number.isFinite(value) ? check.ok(value) : null)

const median = (values: ReadonlyArray<number>) => {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b)
  if (sorted.length === 0) return Number.NaN
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2
}

/** The worst figure of the runs: the highest, since memory and the failure counts are budgets from above. */
const worst = (values: ReadonlyArray<number>) => {
  const measured = values.filter(Number.isFinite)
  return measured.length === 0 ? Number.NaN : Math.max(...measured)
}

/** Every target run by run, and its median (or worst) over the runs with the verdict on that. */
const renderRuns = (reports: ReadonlyArray<Report>) => {
  const first = reports[0]!.machine
  const last = reports.at(-1)!.machine
  const out: Array<string> = []
  out.push(`${reports.length} runs (BENCH_RUNS), ${first.date} to ${last.date.slice(11)}, each with its own processes and database; ` +
    "the last run's report is given in full. Latency and throughput are judged on their median over the runs, memory and correctness on the worst run.")
  out.push("")
  out.push(`| target | budget | ${reports.map((r) => r.machine.date.slice(11, 16)).join(" | ")} | over the runs | verdict | runs met |`)
  out.push(`|---|---|${reports.map(() => "---|").join("")}---|---|---|`)
  for (const check of TARGET_CHECKS) {
    const values = reports.map(check.figure)
    const combined = check.across === "median" ? median(values) : worst(values)
    const met = values.filter((v) => judged(check, v) === true).length
    out.push(`| ${check.label} | ${check.budget} | ${values.map((v) => Number.isFinite(v) ? check.show(v) : "n/a").join(" | ")} | ` +
      `${Number.isFinite(combined) ? check.show(combined) : "n/a"} (${check.across}) | ${verdict(judged(check, combined))} | ${met} of ${reports.length} |`)
  }
  return out.join("\n")
}

const render = (report: Report) => {
  const { machine, loads, ttfbs, audit, rss } = report
  const out: Array<string> = []
  out.push(`Run of ${machine.date}: ${machine.cpus} CPUs (${machine.cpuModel}), ${machine.memGb.toFixed(1)} GB RAM, Node ${machine.node}, ` +
    `${machine.postgres} (${machine.database}); ${DURATION} s per load step${PAIRED_SLICES > 1 ? ` (${2 * DURATION} s in ${PAIRED_SLICES} slices for the proxy and the gateway at ${PAIRED_CONNECTIONS.join(" and ")} connections)` : ""}, ${WARMUP} s warm-up per target and mode, ` +
    `${TTFB_REQUESTS} sequential requests for TTFB. ${process.env.REDIS_URL ? "Redis (REDIS_URL): rate limits and call records. " : "No Redis: call records off. "}` +
    `Driver, mock upstream, proxies, gateway and Postgres all share this machine.`)
  out.push("")

  // Targets first: the verdicts, then the shares of the node:http-only proxy (not targets).
  const ttfbDirect = ttfbs.find((t) => t.target === "direct")
  const gatewayLoads = loads.filter((l) => l.target === "gateway")
  out.push("| target | budget | measured | verdict |")
  out.push("|---|---|---|---|")
  for (const check of TARGET_CHECKS) {
    const value = check.figure(report)
    const shown = check.detail?.(report) ?? (Number.isFinite(value) ? check.show(value) : "n/a")
    out.push(`| ${check.label} | ${check.budget} | ${shown} | ${verdict(judged(check, value))} |`)
  }
  for (const mode of MODES) {
    const shares = [16, 64].map((c) => percent(rpsShare(loads, mode, c, "http-proxy"))).join(" / ")
    out.push(`| (for information) throughput vs the node:http-only proxy, ${mode}, 16 / 64 conns | | ${shares} | not a target |`)
  }
  out.push("")

  out.push("Load (autocannon; latency is to the last byte of the answer, so for streams the whole stream; RPS counts 2xx only;")
  out.push("added = gateway or proxy minus direct in the same step; CPU = the gateway's or the reference proxy's process CPU over the step,")
  out.push("100% = one core, and per successful call):")
  out.push("")
  out.push("| mode | conns | target | RPS | p50 ms | p99 ms | added p50 | added p99 | non-2xx | errors | CPU | CPU us/call | RSS MB |")
  out.push("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
  for (const mode of MODES) {
    for (const c of CONNECTIONS) {
      const direct = findLoad(loads, mode, c, "direct")
      for (const target of TARGETS) {
        const l = findLoad(loads, mode, c, target)
        if (!l) continue
        const a50 = target === "direct" || !direct ? "" : signed(l.p50 - direct.p50)
        const a99 = target === "direct" || !direct ? "" : signed(l.p99 - direct.p99)
        const errors = l.errors + l.timeouts + l.incomplete
        const perCall = cpuPerCallUs(l)
        out.push(`| ${mode} | ${c} | ${target} | ${l.rps.toFixed(0)} | ${ms(l.p50)} | ${ms(l.p99)} | ${a50} | ${a99} | ${l.non2xx} | ${errors} | ` +
          `${l.cpuPct === null ? "" : `${l.cpuPct.toFixed(0)}%`} | ${perCall === null ? "" : perCall.toFixed(0)} | ${l.peakRssMb === null ? "" : mb(l.peakRssMb)} |`)
      }
    }
  }
  out.push("")
  // Where the throughput ratio comes from: when both saturate their core, the gateway's share of
  // the proxy's RPS is about the proxy's CPU per call over the gateway's.
  const perCallPairs = MODES.flatMap((mode) =>
    [16, 64].flatMap((c) => {
      const gw = findLoad(loads, mode, c, "gateway")
      const proxy = findLoad(loads, mode, c, "proxy")
      const g = gw ? cpuPerCallUs(gw) : null
      const p = proxy ? cpuPerCallUs(proxy) : null
      return g === null || p === null ? [] : [`${mode} ${c} conns ${g.toFixed(0)} against ${p.toFixed(0)} us (${(g / p).toFixed(1)}x)`]
    }))
  if (perCallPairs.length > 0) {
    out.push(`CPU per call, gateway against the reference proxy: ${perCallPairs.join("; ")}. The 40% target asks for at most 2.5x.`)
    out.push("")
  }
  const slicedShares = MODES.flatMap((mode) =>
    PAIRED_CONNECTIONS.flatMap((c) => {
      const gw = findLoad(loads, mode, c, "gateway")?.sliceRps
      const proxy = findLoad(loads, mode, c, "proxy")?.sliceRps
      if (gw === undefined || proxy === undefined) return []
      return [`${mode} ${c} conns ${gw.map((g, i) => percent(g / (proxy[i] ?? Number.NaN))).join(", ")}`]
    }))
  if (slicedShares.length > 0) {
    out.push(`At ${PAIRED_CONNECTIONS.join(" and ")} connections the reference proxy and the gateway took turns in ${PAIRED_SLICES} slices ` +
      `of ${(2 * DURATION / PAIRED_SLICES).toFixed(1)} s each (proxy, gateway, gateway, proxy, ...; the gateway's settlements written ` +
      `before the next slice), and their rows above sum the slices. The gateway's share of the proxy's RPS slice by slice: ` +
      `${slicedShares.join("; ")}.`)
    out.push("")
  }
  out.push(`Stream time to first body byte, 1 connection, ${TTFB_REQUESTS} sequential requests per target (round-robin across targets):`)
  out.push("")
  out.push("| target | TTFB p50 ms | TTFB p99 ms | added TTFB p50 | whole stream p50 ms | failures |")
  out.push("|---|---|---|---|---|---|")
  for (const t of ttfbs) {
    out.push(`| ${t.target} | ${ms(t.p50)} | ${ms(t.p99)} | ${t.target === "direct" || !ttfbDirect ? "" : signed(t.p50 - ttfbDirect.p50)} | ${ms(t.totalP50)} | ${t.failures} |`)
  }
  out.push("")
  out.push(`Memory: gateway RSS ${mb(rss.idleMb)} MB after setup, peak ${mb(rss.peakMb)} MB sampled every 200 ms ` +
    `(kernel high-water mark VmHWM ${mb(rss.hwmMb)} MB), ${mb(rss.stream256Mb)} MB during the 256-connection stream step; ` +
    `reference proxy peak ${mb(rss.proxyPeakMb)} MB.`)
  out.push("")
  const statusList = Object.entries(audit.cutOffStatuses).map(([s, n]) => `${n} ${s}`).join(", ") || "none"
  out.push(`Ledger audit (platform "Bench", ${END_USERS === 1 ? "one end user" : `${END_USERS} end users`}): ${audit.okCalls} successful gateway calls seen by the clients ` +
    `(${audit.okWithoutId} without a request id); ${audit.logRows} inference_logs rows, ${audit.debitRows} budget debit rows. ` +
    `Per request id: ${audit.lostLogs} lost / ${audit.doubleLogs} double log rows, ${audit.lostDebits} lost / ${audit.doubleDebits} double debits, ` +
    `${audit.walletDebitAnomalies} calls without exactly one wallet debit. ` +
    `${audit.cutOff} further settled calls were cut off by the end of a load step (client gone; statuses: ${statusList}), ` +
    `${audit.cutOffAnomalies} of them without exactly one log, debit and wallet row. ` +
    `Wallet change ${audit.walletChange} USD vs sum of log costs ${audit.logCostSum} USD: ${audit.walletMatches ? "equal" : "**different**"}; ` +
    `budget used ${audit.budgetUsed} USD vs debit rows ${audit.debitSum} USD: ${audit.budgetMatches ? "equal" : "**different**"}; ` +
    `ledger chain ${audit.chainOk ? "consistent" : "**broken**"}. ` +
    (audit.upstreamCalls === null
      ? ""
      : `The mock upstream served ${audit.upstreamCalls} calls for the gateway: ${audit.upstreamCalls - audit.logRows} ` +
        `upstream calls left no log row or debit (answered upstream, never settled: cost not billed). `) +
    `Settlement queue drained ${(audit.settleWaitMs / 1000).toFixed(1)} s after the last step.`)
  out.push("")
  for (const l of gatewayLoads.filter((l) => l.firstFailure !== null)) {
    out.push(`First non-2xx answer of the gateway in ${l.mode} c=${l.connections} (statuses ${JSON.stringify(l.statuses)}): \`${l.firstFailure}\``, "")
  }
  out.push(`Gateway log during the run: ${report.gatewayLog.errors} error and ${report.gatewayLog.warnings} warning entries` +
    (report.gatewayLog.sample.length > 0 ? "; the most recent, grouped by message and cause:" : "."))
  if (report.gatewayLog.sample.length > 0) {
    out.push("")
    out.push("```")
    for (const line of report.gatewayLog.sample) out.push(line.slice(0, 300))
    out.push("```")
  }
  return out.join("\n")
}

const writeDoc = (markdown: string) => {
  const block = `<!-- bench:results -->\n${markdown}\n<!-- /bench:results -->`
  const current = existsSync(DOC) ? readFileSync(DOC, "utf8") : "# Performance\n"
  const pattern = /<!-- bench:results -->[\s\S]*?<!-- \/bench:results -->/
  const next = pattern.test(current) ? current.replace(pattern, () => block) : `${current.trimEnd()}\n\n${block}\n`
  writeFileSync(DOC, next)
}

// ---------------------------------------------------------------------------------------------
// Main

const cleanups: Array<() => Promise<void>> = []

const cleanup = async () => {
  while (cleanups.length > 0) {
    const step = cleanups.pop()
    try {
      await step?.()
    } catch (error) {
      log(`cleanup: ${String(error)}`)
    }
  }
}

/** One whole run: fresh processes and database, every step, the audit. */
const runOnce = async (): Promise<Report> => {
  // Each run audits its own calls, on its own database.
  gatewayIds.clear()
  gatewayOkWithoutId = 0
  const tempDir = mkdtempSync(join(tmpdir(), "gateway-bench-"))
  // Run as root, embedded Postgres drops to a `postgres` user that must traverse this dir.
  chmodSync(tempDir, 0o755)
  cleanups.push(async () => rmSync(tempDir, { recursive: true, force: true }))

  // Database.
  const serverUrl = process.env.DATABASE_URL
  let gatewayDbUrl: string | undefined
  let database: string
  if (serverUrl !== undefined && serverUrl !== "") {
    const name = `gw_bench_${randomBytes(6).toString("hex")}`
    const admin = new pg.Client({ connectionString: serverUrl })
    await admin.connect()
    await admin.query(`CREATE DATABASE ${name}`)
    await admin.end()
    gatewayDbUrl = withDatabase(serverUrl, name)
    database = `database ${name} on DATABASE_URL's server, dropped afterwards`
    cleanups.push(async () => {
      const client = new pg.Client({ connectionString: serverUrl })
      await client.connect()
      await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      await client.end()
    })
  } else {
    database = "the gateway's embedded Postgres in a temp dir"
  }

  // Upstream and reference proxy.
  const upstream = spawnNode("upstream", "bench/mockUpstream.ts", { PORT: "0" })
  cleanups.push(() => stopChild(upstream, 3000))
  const upstreamUrl = (await waitForLine(upstream, /listening (http:\/\/\S+)/, 30_000))[1]!
  const proxy = spawnNode("proxy", "bench/referenceProxy.ts", { PORT: "0", UPSTREAM_URL: upstreamUrl }, PROXY_NODE_ARGS)
  cleanups.push(() => stopChild(proxy, 3000))
  const proxyUrl = (await waitForLine(proxy, /listening (http:\/\/\S+)/, 30_000))[1]!
  const httpProxy = spawnNode("http-proxy", "bench/httpProxy.ts", { PORT: "0", UPSTREAM_URL: upstreamUrl })
  cleanups.push(() => stopChild(httpProxy, 3000))
  const httpProxyUrl = (await waitForLine(httpProxy, /listening (http:\/\/\S+)/, 30_000))[1]!
  log(`mock upstream ${upstreamUrl}, reference proxy ${proxyUrl}, node:http proxy ${httpProxyUrl}`)

  // Gateway.
  const adminKey = `sk-admin_${base62(40)}`
  const gatewayEnv: Record<string, string> = {
    PORT: "0",
    MCP_PORT: "0",
    HOST: "127.0.0.1",
    GATEWAY_ADMIN_KEY: adminKey,
    GATEWAY_DATA_DIR: join(tempDir, "data"),
    GATEWAY_DEMO: "false",
    GATEWAY_ALLOW_PRIVATE_URLS: "true"
  }
  if (gatewayDbUrl !== undefined) gatewayEnv.DATABASE_URL = gatewayDbUrl
  const gateway = spawnNode("gateway", GATEWAY_ENTRY, gatewayEnv, GATEWAY_NODE_ARGS)
  // SIGTERM: the gateway drains in-flight settlements (and stops its embedded Postgres) first.
  cleanups.push(() => stopChild(gateway, 20_000))
  const gatewayUrl = (await waitForLine(gateway, /API listening on (http:\/\/\S+)/, 120_000))[1]!
  let dbUrl = gatewayDbUrl
  if (dbUrl === undefined) {
    const port = gateway.lines.map((l) => l.match(/embedded Postgres on 127\.0\.0\.1:(\d+)/)?.[1]).find((p) => p !== undefined)
    if (port === undefined) throw new Error("could not find the embedded Postgres port in the gateway's output")
    dbUrl = `postgres://postgres:postgres@127.0.0.1:${port}/gateway`
  }
  const gatewayPid = gateway.process.pid!
  log(`gateway ${gatewayUrl} (pid ${gatewayPid})`)
  const setup = await setUpGateway(gatewayUrl, adminKey, upstreamUrl)
  const targets: Record<TargetName, Target> = {
    direct: { name: "direct", base: upstreamUrl, keys: ["sk-bench-upstream-key"] },
    proxy: { name: "proxy", base: proxyUrl, keys: ["sk-bench-upstream-key"] },
    "http-proxy": { name: "http-proxy", base: httpProxyUrl, keys: ["sk-bench-upstream-key"] },
    gateway: { name: "gateway", base: gatewayUrl, keys: setup.endUserKeys }
  }
  // Smoke test: one answer of each kind through the gateway before measuring anything.
  for (const mode of MODES) {
    const smoke = await load(targets.gateway, mode, 1, 0.3, null)
    if (smoke.ok === 0 || smoke.non2xx > 0 || smoke.incomplete > 0) {
      throw new Error(`gateway smoke test (${mode}) failed: ${JSON.stringify(smoke.statuses)}\n${gateway.lines.slice(-20).join("\n")}`)
    }
  }

  const sampler = new Sampler(gatewayPid)
  sampler.start()
  const proxySampler = new Sampler(proxy.process.pid!)
  proxySampler.start()
  cleanups.push(async () => {
    sampler.stop()
    proxySampler.stop()
  })
  sampler.sample()
  const idleMb = sampler.peakKb / 1024

  if (WARMUP > 0) {
    log(`warm-up ${WARMUP} s per target and mode`)
    for (const mode of MODES) for (const target of TARGETS) await load(targets[target], mode, 16, WARMUP, null)
  }

  const loads: Array<LoadResult> = []
  let stream256Mb: number | null = null
  const logLoad = (result: LoadResult) =>
    log(`${result.mode} c=${result.connections} ${result.target}: ${result.rps.toFixed(0)} rps, p50 ${ms(result.p50)} ms, p99 ${ms(result.p99)} ms, ` +
      `non-2xx ${result.non2xx}, errors ${result.errors + result.timeouts}, incomplete ${result.incomplete}` +
      (result.cpuPct === null ? "" : `, cpu ${result.cpuPct.toFixed(0)}% (${cpuPerCallUs(result)?.toFixed(0)} us/call), rss ${mb(result.peakRssMb)} MB`) +
      (result.sliceRps === undefined ? "" : `; slices ${result.sliceRps.map((r) => r.toFixed(0)).join(" ")} rps`) +
      (result.firstFailure === null ? "" : `; first non-2xx: ${result.firstFailure}`))
  const paired = PAIRED_SLICES > 1 && TARGETS.includes("proxy") && TARGETS.includes("gateway")
  const countClient = new pg.Client({ connectionString: dbUrl })
  await countClient.connect()
  cleanups.push(() => countClient.end())
  for (const mode of MODES) {
    for (const connections of CONNECTIONS) {
      for (const name of TARGETS) {
        if (paired && PAIRED_CONNECTIONS.includes(connections) && (name === "proxy" || name === "gateway")) {
          if (name === "gateway") continue // measured with the proxy
          const pair = await pairedLoad(
            { target: targets.proxy, sampler: proxySampler },
            { target: targets.gateway, sampler },
            mode,
            connections,
            2 * DURATION,
            settlementsWritten(countClient)
          )
          for (const result of pair) {
            loads.push(result)
            logLoad(result)
          }
          continue
        }
        const result = await load(targets[name], mode, connections, DURATION, name === "gateway" ? sampler : name === "proxy" ? proxySampler : null)
        loads.push(result)
        if (name === "gateway" && mode === "stream" && connections === 256) stream256Mb = result.peakRssMb
        logLoad(result)
      }
    }
  }

  log(`stream TTFB, ${TTFB_REQUESTS} sequential requests per target`)
  const ttfbs = await ttfb(ALL_TARGETS.map((name) => targets[name]), TTFB_REQUESTS)

  log("ledger audit")
  const audit = await auditLedger(dbUrl, setup.platformId, upstreamUrl)
  sampler.sample()
  const hwm = readStatusKb(gatewayPid, "VmHWM")
  const pgVersion = await (async () => {
    const client = new pg.Client({ connectionString: dbUrl })
    await client.connect()
    try {
      return String((await client.query("SHOW server_version")).rows[0].server_version).split(" ")[0]
    } finally {
      await client.end()
    }
  })()

  const report: Report = {
    machine: {
      date: new Date().toISOString().replace("T", " ").slice(0, 16) + " UTC",
      cpus: availableParallelism(),
      cpuModel: cpus()[0]?.model.trim() ?? "unknown CPU",
      memGb: totalmem() / 2 ** 30,
      node: process.version,
      postgres: `PostgreSQL ${pgVersion}`,
      database
    },
    loads,
    ttfbs,
    audit,
    rss: {
      idleMb,
      peakMb: sampler.peakKb / 1024,
      hwmMb: hwm === null ? null : hwm / 1024,
      stream256Mb,
      proxyPeakMb: proxySampler.peakKb / 1024
    },
    gatewayLog: { errors: gateway.counts.error, warnings: gateway.counts.warning, sample: summarizeProblems(gateway.lines).slice(0, 10) }
  }
  return report
}

const main = async () => {
  const started = performance.now()
  const reports: Array<Report> = []
  let lastReport = ""
  for (let run = 1; run <= RUNS; run++) {
    if (RUNS > 1) log(`run ${run} of ${RUNS}`)
    try {
      reports.push(await runOnce())
    } finally {
      await cleanup() // this run's children and database, before the next run starts
    }
    lastReport = render(reports.at(-1)!)
    process.stdout.write(`\n${lastReport}\n\n`)
  }
  const runsTable = RUNS > 1 ? renderRuns(reports) : undefined
  if (runsTable !== undefined) process.stdout.write(`\n${runsTable}\n\n`)
  const markdown = runsTable === undefined ? lastReport : `${runsTable}\n\n${lastReport}`
  if (WRITE_DOC) {
    writeDoc(markdown)
    log(`wrote ${DOC}`)
  }
  log(`done in ${((performance.now() - started) / 1000).toFixed(0)} s`)
}

let stopping = false
const abort = (signal: NodeJS.Signals) => {
  if (stopping) return
  stopping = true
  log(`${signal}: stopping children`)
  void cleanup().finally(() => process.exit(130))
}
process.on("SIGINT", abort)
process.on("SIGTERM", abort)

try {
  await main()
} catch (error) {
  process.exitCode = 1
  log(`failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}`)
} finally {
  await cleanup()
}
process.exit()
