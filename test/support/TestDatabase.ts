// A fresh database per test file on the run's Postgres server; dropped afterwards.
import { Effect, Layer, Redacted } from "effect"
import pg from "pg"
import { randomBytes } from "node:crypto"
import { inject } from "vitest"
import { DatabaseUrl } from "../../layers/platform/EmbeddedPostgres.js"

export interface TestDatabase {
  readonly url: string
  readonly name: string
  /** A pool on the test database, for assertions straight from the tables. */
  readonly pool: pg.Pool
  readonly drop: () => Promise<void>
}

const withDatabase = (adminUrl: string, name: string): string => {
  const url = new URL(adminUrl)
  url.pathname = `/${name}`
  return url.toString()
}

export const createTestDatabase = async (): Promise<TestDatabase> => {
  const adminUrl = inject("pgAdminUrl")
  const name = `gw_test_${randomBytes(6).toString("hex")}`
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${name}`)
  await admin.end()
  const url = withDatabase(adminUrl, name)
  const pool = new pg.Pool({ connectionString: url, max: 4 })
  // DROP ... WITH (FORCE) may terminate a connection the pool is still closing: not an error.
  pool.on("error", () => {})
  return {
    url,
    name,
    pool,
    drop: async () => {
      await pool.end()
      const client = new pg.Client({ connectionString: adminUrl })
      await client.connect()
      await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      await client.end()
    }
  }
}

/** A DatabaseUrl layer on a fresh test database, dropped when the layer closes (unit tests). */
export const TestDatabaseUrlLive = Layer.scoped(
  DatabaseUrl,
  Effect.acquireRelease(Effect.promise(createTestDatabase), (db) => Effect.promise(db.drop)).pipe(
    Effect.map((db) => Redacted.make(db.url))
  )
)

/**
 * Waits until `n` gateway instances on this database hold their LISTEN connection for cache
 * invalidation (an instance serves requests before that subscription is up).
 */
export const waitForListeners = async (pool: pg.Pool, n: number) => {
  const deadline = Date.now() + 10_000
  for (;;) {
    const res = await pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'LISTEN %'"
    )
    if ((res.rows[0]?.n ?? 0) >= n) return
    if (Date.now() > deadline) throw new Error(`waitForListeners: fewer than ${n} LISTEN connections after 10 s`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}
