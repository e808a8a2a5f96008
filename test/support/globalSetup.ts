// One Postgres server for the whole run: DATABASE_URL when set (CI), else an embedded one in a
// temp dir. Each test file then creates (and drops) its own fresh database on it. Also builds
// `dist/main.js` (what `npm start` runs), for the tests that start the bundle, and the web console
// (`dist/console`), for the browser tests.
import { Effect, Exit, Scope } from "effect"
import { execFileSync } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { TestProject } from "vitest/node"
import { startEmbedded } from "../../layers/platform/EmbeddedPostgres.js"

declare module "vitest" {
  export interface ProvidedContext {
    pgAdminUrl: string
  }
}

export default async function setup(project: TestProject) {
  execFileSync("npm", ["run", "build", "--silent"], { stdio: "inherit" })
  const configured = process.env.DATABASE_URL
  if (configured !== undefined && configured !== "") {
    project.provide("pgAdminUrl", configured)
    return
  }
  const dir = mkdtempSync(join(tmpdir(), "gateway-test-pg-"))
  const scope = Effect.runSync(Scope.make())
  const embedded = await Effect.runPromise(
    startEmbedded({ dir: join(dir, "pg"), persistent: false }).pipe(Scope.extend(scope))
  )
  project.provide("pgAdminUrl", embedded.adminUrl)
  return async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    rmSync(dir, { recursive: true, force: true })
  }
}
