// A crash (SIGKILL) with settlements still queued (money stays exact through crashes): the
// answers went out, the writes had not. The next start on the same data directory queues them
// again from the settlement journal; every call is then logged and debited exactly once, also
// when a journal that was already written is replayed once more.
import { randomBytes } from "node:crypto"
import { mkdtempSync, readdirSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type pg from "pg"
import { afterAll, beforeAll, expect, it } from "vitest"
import { mintKey } from "../layers/access/KeyFormat.js"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { ok } from "./support/Gateway.js"
import { until } from "./support/Polling.js"
import { type GatewayProcess, spawnEnv, spawnGateway } from "./support/Process.js"
import { createTestDatabase, type TestDatabase } from "./support/TestDatabase.js"

let db: TestDatabase
let upstream: FakeUpstream
const dataDir = mkdtempSync(join(tmpdir(), "gateway-journal-"))
const adminKey = mintKey("admin").raw
const encryptionKey = randomBytes(32).toString("base64")
const CALLS = 5

beforeAll(async () => {
  db = await createTestDatabase()
  db.pool.on("connect", (client) => client.on("error", () => undefined))
  upstream = await startFakeOpenAi()
}, 60_000)

afterAll(async () => {
  await upstream?.close()
  await db?.drop()
  rmSync(dataDir, { recursive: true, force: true })
}, 60_000)

const start = (label: string) =>
  spawnGateway({
    label,
    entry: "bundle",
    env: spawnEnv({ databaseUrl: db.url, dataDir, adminKey, encryptionKey }, { DATABASE_POOL_SIZE: "4" })
  })

const kill = async (gw: GatewayProcess) => {
  process.kill(gw.pid, "SIGKILL")
  await gw.stop() // resolves once the process has exited
}

const journalFiles = () => readdirSync(join(dataDir, "settlements")).filter((n) => n.endsWith(".jsonl"))

it("a SIGKILL loses no queued settlement: the next start writes each once", async () => {
  const first = await start("journal-first")
  ok(await first.call("POST", "/v1/admin/providers", { key: adminKey, body: { slug: "up", kind: "openai", base_url: upstream.url } }))
  ok(await first.call("POST", "/v1/admin/models", {
    key: adminKey,
    body: { slug: "m", providers: [{ provider: "up", provider_model_id: "m-1", input_usd_per_mtok: 3, output_usd_per_mtok: 7 }] }
  }))
  const platform = ok(await first.call("POST", "/v1/admin/platforms", { key: adminKey, body: { name: "journal" } }), 201).body
  const platformId = platform.platform.id as string
  const platformKey = platform.api_key.raw_key as string
  ok(await first.call("PUT", `/v1/platforms/${platformId}/provider-keys/up`, { key: platformKey, body: { api_key: "sk-up" } }))
  ok(await first.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: adminKey, body: { amount_usd: 10 } }))
  const user = ok(await first.call("POST", `/v1/platforms/${platformId}/end-users`, { key: platformKey, body: { external_id: "u" } }), 201).body
  ok(await first.call("POST", `/v1/platforms/${platformId}/end-users/${user.id}/budget`, { key: platformKey, body: { max_usd: 5 } }), 201)

  // Hold the log table so the writer cannot commit: the answers go out, the settlements stay queued.
  const blocker: pg.PoolClient = await db.pool.connect()
  await blocker.query("BEGIN")
  await blocker.query("LOCK TABLE inference_logs IN EXCLUSIVE MODE")
  try {
    for (let i = 0; i < CALLS; i++) {
      ok(await first.call("POST", "/v1/chat/completions", {
        key: user.api_key.raw_key,
        body: { model: "m", messages: [{ role: "user", content: `call ${i}` }] }
      }))
    }
    await kill(first)
    // The killed writer's statement may still wait on the lock in its backend, and Postgres
    // would run it (and commit it) once the lock goes: it notices a dead client only when it
    // answers. End those backends first, so that nothing the crashed process sent is written.
    await blocker.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))")
  } finally {
    await blocker.query("ROLLBACK")
    blocker.release()
  }
  const logsOf = async () =>
    (await db.pool.query("SELECT id, estimated_cost_usd::text AS cost FROM inference_logs WHERE platform_id = $1", [platformId])).rows
  expect(await logsOf()).toHaveLength(0) // nothing was written before the crash
  expect(journalFiles()).toHaveLength(1)

  const ledger = async () => {
    const budget = await db.pool.query("SELECT used_usd::text AS used FROM budgets WHERE platform_id = $1", [platformId])
    const debits = await db.pool.query("SELECT count(*)::int AS n, coalesce(sum(amount_usd), 0)::text AS total FROM budget_transactions WHERE platform_id = $1 AND type = 'debit'", [platformId])
    const wallet = await db.pool.query("SELECT count(*)::int AS n, coalesce(sum(amount_usd), 0)::text AS total FROM platform_wallet_transactions WHERE platform_id = $1 AND type = 'debit'", [platformId])
    const logged = await db.pool.query("SELECT count(*)::int AS n, coalesce(sum(estimated_cost_usd), 0)::text AS total FROM inference_logs WHERE platform_id = $1", [platformId])
    return { used: budget.rows[0].used, debits: debits.rows[0], wallet: wallet.rows[0], logged: logged.rows[0] }
  }

  // The next start queues them again and writes them.
  const second = await start("journal-second")
  const after = await until(ledger, (l) => l.logged.n === CALLS && l.debits.n === CALLS && l.wallet.n === CALLS)
  expect(after.logged.n).toBe(CALLS)
  expect(after.debits).toEqual({ n: CALLS, total: after.logged.total })
  expect(after.wallet).toEqual({ n: CALLS, total: after.logged.total })
  expect(Number(after.used)).toBe(Number(after.logged.total))
  expect(Number(after.logged.total)).toBeGreaterThan(0)
  expect(second.lines.some((line) => line.includes(`${CALLS} settlements of a stopped instance queued again`))).toBe(true)
  // The crashed instance's file is gone; the second instance's own segment holds the replayed lines.
  expect(journalFiles()).toHaveLength(1)

  // A crash after they were written: replaying them again applies nothing twice.
  await kill(second)
  const third = await start("journal-third")
  await until(async () => third.lines.some((line) => line.includes("settlements of a stopped instance queued again")), (seen) => seen, 10_000)
  const budgetRead = await third.call("GET", `/v1/platforms/${platformId}/end-users/${user.id}/budget`, { key: platformKey }) // waits for the queue
  ok(budgetRead)
  expect(await ledger()).toEqual(after)
  await third.stop()
  expect(journalFiles()).toHaveLength(0) // a clean stop leaves no journal behind
}, 120_000)
