// What a start prints. A busy port stops the start with one line. A generated operator key is
// printed by the first start that comes up: a first start that fails after creating it (the port
// is busy) does not swallow it, and later starts do not print it again. The listening lines name the real bind address: with
// DATABASE_URL and no HOST the gateway listens on every interface and says so, with a base_url
// that works from this machine.
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { createServer, type Server } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, expect, it } from "vitest"
import { runToExit, spawnEnv, spawnGateway } from "./support/Process.js"
import { createTestDatabase, type TestDatabase } from "./support/TestDatabase.js"
import { randomBytes } from "node:crypto"

let db: TestDatabase
const dirs: Array<string> = []
const encryptionKey = randomBytes(32).toString("base64")

beforeAll(async () => {
  db = await createTestDatabase()
}, 60_000)

afterAll(async () => {
  await db?.drop()
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
}, 60_000)

const dataDir = () => {
  const dir = mkdtempSync(join(tmpdir(), "gateway-report-"))
  dirs.push(dir)
  return dir
}

/** The gateway's environment with no GATEWAY_ADMIN_KEY: the key is generated into the data dir. */
const envFor = (dir: string, extra: Record<string, string | undefined> = {}) =>
  spawnEnv({ databaseUrl: db.url, dataDir: dir, adminKey: "", encryptionKey }, { GATEWAY_ADMIN_KEY: undefined, ...extra })

const keyLine = /^Operator key \(generated, kept in the data dir\): (\S+)$/

it("a busy port: one line, exit 1; the operator key it generated is printed by the first start that comes up, once", async () => {
  const dir = dataDir()
  const busy: Server = createServer()
  await new Promise<void>((resolve) => busy.listen(0, "127.0.0.1", resolve))
  const port = (busy.address() as { port: number }).port
  let failed
  try {
    failed = await runToExit({ env: envFor(dir, { PORT: String(port) }), timeoutMs: 60_000 })
  } finally {
    await new Promise<void>((resolve) => busy.close(() => resolve()))
  }
  expect(failed.code).toBe(1)
  expect(failed.output.split("\n").filter((line) => line.trim() !== "")).toEqual([
    `cannot listen on 127.0.0.1:${port}: the address is in use; stop what uses it, or set PORT (API), MCP_PORT (tool service) or HOST`
  ])
  const key = readFileSync(join(dir, "admin-key"), "utf8").trim()
  expect(failed.output).not.toContain(key)
  expect(existsSync(join(dir, "admin-key.unprinted"))).toBe(true)

  const first = await spawnGateway({ label: "report-first-up", entry: "bundle", env: envFor(dir) })
  try {
    expect(first.lines.map((line) => line.match(keyLine)?.[1]).filter((k) => k !== undefined)).toEqual([key])
    // The marker goes once the key line is out: the line can reach us before the child removes it.
    await expect.poll(() => existsSync(join(dir, "admin-key.unprinted")), { timeout: 5_000 }).toBe(false)
    expect((await first.call("GET", "/v1/admin/platforms", { key })).status).toBe(200)
  } finally {
    await first.stop()
  }

  const again = await spawnGateway({ label: "report-again", entry: "bundle", env: envFor(dir) })
  try {
    expect(again.lines.filter((line) => keyLine.test(line))).toEqual([])
    expect((await again.call("GET", "/v1/admin/platforms", { key })).status).toBe(200)
  } finally {
    await again.stop()
  }
}, 120_000)

it("with DATABASE_URL and no HOST: listens on every interface and says so, with a base_url this machine reaches", async () => {
  const gw = await spawnGateway({ label: "report-wildcard", entry: "bundle", env: envFor(dataDir(), { HOST: undefined }) })
  try {
    const api = gw.lines.find((line) => line.startsWith("API listening on"))
    const tools = gw.lines.find((line) => line.startsWith("Tool service listening on"))
    const apiPort = new URL(gw.baseUrl).port
    const toolsPort = new URL(gw.toolsUrl!).port
    expect(gw.baseUrl).toBe(`http://127.0.0.1:${apiPort}`)
    expect(api).toBe(`API listening on 0.0.0.0:${apiPort} (all interfaces; base_url http://127.0.0.1:${apiPort}, docs http://127.0.0.1:${apiPort}/docs, console http://127.0.0.1:${apiPort}/console)`)
    expect(tools).toBe(`Tool service listening on 0.0.0.0:${toolsPort} (all interfaces; mcp_url http://127.0.0.1:${toolsPort})`)
    expect((await gw.call("GET", "/health")).status).toBe(200)
  } finally {
    await gw.stop()
  }
}, 60_000)
