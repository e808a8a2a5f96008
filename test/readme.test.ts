// README.md as a newcomer follows it: a fresh `npm start` (the bundle, embedded Postgres, demo on,
// no DATABASE_URL or REDIS_URL) in an empty folder, then every ```sh, ```js and ```sql block in
// order (test/support/ReadmeRunner.ts says how each kind runs), with the README's fixed local
// ports (8080, 8081, the webhook receiver's 4000) pointed at free ones. Each block is a test named
// by its line in README.md; a broken block fails with its output, and the later blocks still run.
// README_TEST_VERBOSE=1 prints every block's output.
import { chmodSync, existsSync, mkdtempSync, readFileSync, symlinkSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type GatewayProcess, spawnGateway } from "./support/Process.js"
import {
  blockName,
  freePort,
  hasPlaceholder,
  markExpectedStatuses,
  type Outcome,
  parseBlocks,
  removeTree,
  rewritePorts,
  runJs,
  runSql,
  ShellSession
} from "./support/ReadmeRunner.js"

const ROOT = fileURLToPath(new URL("..", import.meta.url))
const blocks = parseBlocks(readFileSync(join(ROOT, "README.md"), "utf8"))
const RUN = new Set(["sh", "js", "sql"])

/** The first start runs initdb: generous. */
const START_TIMEOUT_MS = 240_000
const BLOCK_TIMEOUT_MS = 120_000

/** The machine's own settings must not leak into "a fresh clone with the defaults". */
const isGatewaySetting = (name: string) =>
  name.startsWith("GATEWAY_") || name.startsWith("TOOLAPP_") || name.startsWith("OTEL_") ||
  ["DATABASE_URL", "DATABASE_POOL_SIZE", "REDIS_URL", "HOST", "PORT", "MCP_PORT"].includes(name)

const cleanEnv = (): Record<string, string> => {
  const env: Record<string, string> = {}
  for (const [name, value] of Object.entries(process.env)) {
    if (value !== undefined && !isGatewaySetting(name)) env[name] = value
  }
  return env
}

const portOf = (url: string | undefined) => {
  const port = url === undefined ? NaN : Number(new URL(url).port)
  if (!Number.isInteger(port) || port <= 0) throw new Error(`no port in the listening line: ${url}`)
  return port
}

/** The tail of a block's output, enough to see what broke. */
const tail = (text: string) => (text.length > 6_000 ? `...\n${text.slice(-6_000)}` : text)

/** A Postgres left by a gateway that did not stop cleanly: stopped by its pid (fast shutdown). */
const stopLeftoverPostgres = async (dataDir: string) => {
  const pidFile = join(dataDir, "pg", "postmaster.pid")
  if (!existsSync(pidFile)) return
  const pid = Number(readFileSync(pidFile, "utf8").split("\n")[0])
  if (!Number.isInteger(pid) || pid <= 0) return
  const alive = () => {
    try {
      process.kill(pid, 0)
      return true
    } catch {
      return false
    }
  }
  if (!alive()) return
  process.kill(pid, "SIGINT")
  for (let i = 0; i < 100 && alive(); i++) await new Promise((r) => setTimeout(r, 100))
}

describe("README.md, every runnable block in order, against a fresh embedded start", () => {
  let dir = ""
  let gateway: GatewayProcess | undefined
  let session: ShellSession | undefined
  /** README address port -> the port really used: the listeners, and the webhook receiver (4000). */
  let ports: Record<number, number> = {}

  beforeAll(async () => {
    // An empty folder with the checkout's packages: what the JS blocks import.
    dir = mkdtempSync(join(tmpdir(), "gateway-readme-"))
    // As a checkout is: passable by others (under root the embedded server runs as user postgres).
    chmodSync(dir, 0o755)
    symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"))
    const unset = Object.fromEntries(Object.keys(process.env).filter(isGatewaySetting).map((name) => [name, undefined]))
    gateway = await spawnGateway({
      label: "readme",
      entry: "bundle",
      cwd: dir,
      env: { ...unset, PORT: "0", MCP_PORT: "0", GATEWAY_DATA_DIR: join(dir, ".data") },
      startTimeoutMs: START_TIMEOUT_MS
    })
    // The demo catalog (the mock provider and its models) is seeded after the listeners open.
    await gateway.waitForLine(/Demo platform ready/, START_TIMEOUT_MS)
    ports = { 8080: portOf(gateway.baseUrl), 8081: portOf(gateway.toolsUrl), 4000: await freePort() }
    session = new ShellSession(dir, cleanEnv())
  }, START_TIMEOUT_MS + 60_000)

  afterAll(async () => {
    await session?.stop()
    await gateway?.stop(30_000)
    if (dir !== "") {
      await stopLeftoverPostgres(join(dir, ".data"))
      removeTree(dir)
    }
  }, 90_000)

  it("has runnable blocks, and no sh or js block with a placeholder left in it", () => {
    expect(blocks.filter((b) => RUN.has(b.lang) && b.skip === undefined).length).toBeGreaterThan(10)
    const placeholders = blocks.filter((b) => (b.lang === "sh" || b.lang === "js") && b.skip === undefined && hasPlaceholder(b.code))
    expect(placeholders.map(blockName)).toEqual([])
  })

  for (const [index, block] of blocks.entries()) {
    if (!RUN.has(block.lang)) continue
    const name = blockName(block)
    if (block.skip !== undefined) {
      it.skip(`${name} (skipped: ${block.skip})`, () => {})
      continue
    }
    if (block.lang === "sql" && hasPlaceholder(block.code)) {
      it.skip(`${name} (skipped: it has placeholders for the reader to fill in)`, () => {})
      continue
    }
    it(name, async () => {
      const code = rewritePorts(block.code, ports)
      let outcome: Outcome
      if (block.lang === "sh") {
        outcome = await session!.run(markExpectedStatuses(code), BLOCK_TIMEOUT_MS)
      } else if (block.lang === "js") {
        outcome = await runJs(dir, index, code, { ...cleanEnv(), ...session!.exportedEnv() }, BLOCK_TIMEOUT_MS)
      } else {
        const urlFile = join(dir, ".data", "database-url")
        outcome = existsSync(urlFile)
          ? await runSql(dir, index, code, readFileSync(urlFile, "utf8").trim(), { ...cleanEnv(), ...session!.exportedEnv() }, BLOCK_TIMEOUT_MS)
          : { ok: false, output: ".data/database-url is missing: the gateway writes it while it runs on the embedded database" }
      }
      if (process.env.README_TEST_VERBOSE === "1") console.log(`--- ${name}\n${outcome.output}`)
      if (!outcome.ok) throw new Error(`${name} failed:\n${tail(outcome.output)}`)
    }, BLOCK_TIMEOUT_MS + 30_000)
  }

  it("leaves the gateway serving after the tour", async () => {
    expect((await gateway!.call("GET", "/health")).status).toBe(200)
  })
})
