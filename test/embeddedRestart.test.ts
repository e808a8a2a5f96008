// The embedded default (DATABASE_URL unset) across crashes and restarts, as `npm start` runs it:
// a first start is not stopped by what a start killed during initdb left; a gateway killed with
// SIGKILL leaves its Postgres running, and the next start on the same data dir stops that server
// and comes up with the data; a stale postmaster.pid of a server killed too is Postgres's to
// replace; a second start beside a running one stops with one line (exit 1) and the first keeps
// serving; Ctrl-C (SIGINT to the whole process group, as a terminal sends it) and SIGTERM stop
// cleanly, so the next start queues nothing again and every call counts once. No Postgres
// outlives the file.
import { execFileSync, spawnSync } from "node:child_process"
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { connect } from "node:net"
import { networkInterfaces, tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { afterAll, expect, it } from "vitest"
import { until } from "./support/Polling.js"
import { type GatewayProcess, runToExit, spawnGateway } from "./support/Process.js"

const dataDir = mkdtempSync(join(tmpdir(), "gateway-restart-"))
const pgDir = join(dataDir, "pg")

/** What `npm start` sees on a laptop: no DATABASE_URL, no HOST, no operator key, the demo on. */
const env = {
  DATABASE_URL: undefined,
  REDIS_URL: undefined,
  OTEL_EXPORTER_OTLP_ENDPOINT: undefined,
  HOST: undefined,
  GATEWAY_ADMIN_KEY: undefined,
  GATEWAY_ENCRYPTION_KEY: undefined,
  GATEWAY_ALLOW_PRIVATE_URLS: undefined,
  GATEWAY_DEMO: "true",
  PORT: "0",
  MCP_PORT: "0",
  GATEWAY_DATA_DIR: dataDir
}

const started: Array<GatewayProcess> = []
const start = async (label: string) => {
  const gw = await spawnGateway({ label, entry: "bundle", env, ownGroup: true, startTimeoutMs: 120_000 })
  started.push(gw)
  await gw.waitForLine(/Demo platform ready/, 30_000)
  return gw
}

/** Postgres processes serving this data dir (the server and its backends), by `ps`. */
const serversOnDataDir = (): Array<number> =>
  execFileSync("ps", ["-eo", "pid=,args="], { encoding: "utf8" }).split("\n")
    .map((line) => line.trim().match(/^(\d+)\s+(.*)$/))
    .filter((m): m is RegExpMatchArray => m !== null && /postgres/.test(m[2]!) && m[2]!.includes(pgDir))
    .map((m) => Number(m[1]))

const running = (pid: number) => {
  try {
    process.kill(pid, 0)
    return !/^Z/.test(execFileSync("ps", ["-o", "stat=", "-p", String(pid)], { encoding: "utf8" }).trim())
  } catch {
    return false
  }
}

afterAll(async () => {
  for (const gw of started) await gw.stop(30_000)
  // A failed test may have left a server: never outlive the file (the last test asserts none is left).
  for (const pid of serversOnDataDir()) {
    try {
      process.kill(pid, "SIGKILL")
    } catch {
      // gone meanwhile
    }
  }
  rmSync(dataDir, { recursive: true, force: true })
}, 60_000)

const demoKey = () => JSON.parse(readFileSync(join(dataDir, "demo-keys.json"), "utf8")).end_user_key as string

const chat = (gw: GatewayProcess, content: string) =>
  gw.call("POST", "/v1/chat/completions", {
    key: demoKey(),
    body: { model: "mock-echo", messages: [{ role: "user", content }] }
  })

/** Calls logged and wallet debits, read through the URL the running gateway published for psql. */
const ledger = async () => {
  const client = new pg.Client({ connectionString: readFileSync(join(dataDir, "database-url"), "utf8").trim() })
  await client.connect()
  try {
    const logs = await client.query("SELECT count(*)::int AS n FROM inference_logs")
    const debits = await client.query("SELECT count(*)::int AS n FROM platform_wallet_transactions WHERE type = 'debit'")
    return { logs: logs.rows[0].n as number, debits: debits.rows[0].n as number }
  } finally {
    await client.end()
  }
}

const postmasterPid = () => Number(readFileSync(join(pgDir, "postmaster.pid"), "utf8").split("\n")[0])
const journalLines = () =>
  existsSync(join(dataDir, "settlements"))
    ? readdirSync(join(dataDir, "settlements")).filter((n) => n.endsWith(".jsonl"))
      .flatMap((n) => readFileSync(join(dataDir, "settlements", n), "utf8").split("\n").slice(1).filter((l) => l !== ""))
    : []
const nonEmptyLines = (text: string) => text.split("\n").filter((line) => line.trim() !== "")
const requeued = (gw: GatewayProcess) => gw.lines.filter((line) => /queued again/.test(line))

let gw: GatewayProcess

it("a first start: listens on 127.0.0.1, holds the data dir's lock, publishes the psql URL, prints the operator key, serves a call", async () => {
  // What a first start killed during initdb leaves: a half-made cluster in its staging directory.
  const deadPid = spawnSync(process.execPath, ["-e", ""]).pid!
  const halfMade = join(dataDir, `pg.init-${deadPid}`)
  mkdirSync(halfMade)
  writeFileSync(join(halfMade, "PG_VERSION"), "18\n")

  gw = await start("embedded-first")
  expect(existsSync(halfMade)).toBe(false)
  const apiLine = gw.lines.find((line) => line.startsWith("API listening on"))!
  expect(apiLine).toMatch(/^API listening on http:\/\/127\.0\.0\.1:\d+ {2}\(base_url http:\/\/127\.0\.0\.1:\d+, docs /)
  expect(gw.toolsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
  // Not reachable on another address of this machine (if it has one).
  const port = Number(new URL(gw.baseUrl).port)
  const other = Object.values(networkInterfaces()).flat().find((a) => a !== undefined && a.family === "IPv4" && !a.internal)
  if (other !== undefined) {
    const refused = await new Promise<boolean>((resolve) => {
      const socket = connect({ host: other.address, port })
      socket.once("connect", () => (socket.destroy(), resolve(false)))
      socket.once("error", () => resolve(true))
    })
    expect(refused, `reachable on ${other.address}:${port}`).toBe(true)
  }

  expect(readFileSync(join(dataDir, "gateway.pid"), "utf8")).toBe(`${gw.pid}\n`)
  const urlFile = join(dataDir, "database-url")
  expect(statSync(urlFile).mode & 0o777).toBe(0o600)
  expect(readFileSync(urlFile, "utf8")).toMatch(/^postgres:\/\/postgres:postgres@127\.0\.0\.1:\d+\/gateway\n$/)

  const adminKey = readFileSync(join(dataDir, "admin-key"), "utf8").trim()
  expect(gw.lines).toContain(`Operator key (generated, kept in the data dir): ${adminKey}`)
  expect(existsSync(join(dataDir, "admin-key.unprinted"))).toBe(false)

  expect((await chat(gw, "before the crash")).status).toBe(200)
  expect(await until(ledger, (l) => l.logs === 1 && l.debits === 1)).toEqual({ logs: 1, debits: 1 })
}, 180_000)

it("SIGKILL leaves its Postgres running; the next start stops that server, comes up with the data and serves", async () => {
  const leftover = postmasterPid()
  gw.signal("SIGKILL")
  expect(await gw.exited).toEqual({ code: null, signal: "SIGKILL" })
  expect(running(leftover)).toBe(true) // the crash as a killed `npm start` leaves it

  gw = await start("embedded-after-kill")
  expect(gw.lines.some((line) => line.includes(`a server left running by a stopped gateway (pid ${leftover}`))).toBe(true)
  expect(running(leftover)).toBe(false)
  expect(postmasterPid()).not.toBe(leftover)
  expect(gw.lines.some((line) => line.startsWith("Operator key"))).toBe(false) // printed once, by the first start

  expect((await chat(gw, "after the crash")).status).toBe(200)
  // The call from before the kill is still there, and counted once (a replayed journal applies nothing twice).
  expect(await until(ledger, (l) => l.logs === 2 && l.debits === 2)).toEqual({ logs: 2, debits: 2 })
}, 180_000)

it("the server killed too (a postmaster.pid naming a dead process) is left to Postgres: the next start recovers and comes up with the data", async () => {
  const server = postmasterPid()
  gw.signal("SIGKILL")
  await gw.exited
  process.kill(-server, "SIGKILL") // the server's own process group: it and its backends
  // Until init has collected it, a killed server's pid still exists (as a zombie).
  const pidExists = async () => {
    try {
      process.kill(server, 0)
      return true
    } catch {
      return false
    }
  }
  expect(await until(pidExists, (exists) => !exists)).toBe(false)
  expect(serversOnDataDir()).toEqual([])
  expect(postmasterPid()).toBe(server) // the stale file is still there
  // The killed server's socket and its lock stay in the socket directory, and the next start
  // may take another port: removed here, as the machine's tmpdir is not ours to fill.
  const [, , , port, socketDir] = readFileSync(join(pgDir, "postmaster.pid"), "utf8").split("\n")
  for (const name of [`.s.PGSQL.${port}`, `.s.PGSQL.${port}.lock`]) rmSync(join(socketDir ?? tmpdir(), name), { force: true })

  gw = await start("embedded-after-both-killed")
  expect(gw.lines.some((line) => /left running|removed .*postmaster\.pid/.test(line))).toBe(false)
  expect(postmasterPid()).not.toBe(server)
  expect((await chat(gw, "after both were killed")).status).toBe(200)
  expect(await until(ledger, (l) => l.logs === 3 && l.debits === 3)).toEqual({ logs: 3, debits: 3 })
}, 180_000)

it("a second start beside a running gateway stops with one line and exit 1; the first keeps serving", async () => {
  const line = `a gateway is already running on this data dir (pid ${gw.pid}, ${dataDir}); stop it first or set GATEWAY_DATA_DIR to another directory`
  const second = await runToExit({ env, timeoutMs: 60_000 })
  expect(second.code).toBe(1)
  expect(nonEmptyLines(second.output)).toEqual([line])

  // Without the lock file (a start racing for it): the running server's parent says the same.
  const lock = join(dataDir, "gateway.pid")
  rmSync(lock)
  const racing = await runToExit({ env, timeoutMs: 60_000 })
  writeFileSync(lock, `${gw.pid}\n`)
  expect(racing.code).toBe(1)
  expect(nonEmptyLines(racing.output)).toEqual([line])

  expect((await chat(gw, "still serving")).status).toBe(200)
  expect(await until(ledger, (l) => l.logs === 4 && l.debits === 4)).toEqual({ logs: 4, debits: 4 })
}, 180_000)

it("Ctrl-C (SIGINT to the whole process group, as a terminal sends it) stops cleanly: Postgres outlives the drain, nothing left, nothing queued again", async () => {
  expect((await chat(gw, "just before Ctrl-C")).status).toBe(200)
  gw.signalGroup("SIGINT")
  expect(await gw.exited).toEqual({ code: 0, signal: null })
  expect(serversOnDataDir()).toEqual([])
  expect(existsSync(join(pgDir, "postmaster.pid"))).toBe(false)
  expect(existsSync(join(dataDir, "gateway.pid"))).toBe(false)
  expect(existsSync(join(dataDir, "database-url"))).toBe(false)
  expect(journalLines()).toEqual([])

  gw = await start("embedded-after-ctrl-c")
  expect(requeued(gw)).toEqual([])
  expect(await until(ledger, (l) => l.logs === 5 && l.debits === 5)).toEqual({ logs: 5, debits: 5 })
}, 180_000)

it("SIGTERM after a call stops cleanly: the next start queues nothing again, the call counts once, no Postgres is left", async () => {
  expect((await chat(gw, "just before SIGTERM")).status).toBe(200)
  gw.signal("SIGTERM")
  expect(await gw.exited).toEqual({ code: 0, signal: null })
  expect(journalLines()).toEqual([])

  gw = await start("embedded-after-sigterm")
  expect(requeued(gw)).toEqual([])
  expect(await until(ledger, (l) => l.logs === 6 && l.debits === 6)).toEqual({ logs: 6, debits: 6 })
  gw.signal("SIGTERM")
  expect(await gw.exited).toEqual({ code: 0, signal: null })
  expect(serversOnDataDir()).toEqual([])
}, 180_000)
