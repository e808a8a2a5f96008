// A fleet loses no money when an instance dies with its disk: a call whose answer reached its
// client was on record before the answer ended, and a call cut by the crash is on record too,
// settled as interrupted (its prompt billed) by whichever instance starts or sweeps next. The
// gateways are real processes on one database; the dead one's data dir is deleted. Each record
// store runs: Postgres, and Redis when REDIS_URL is set.
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Redis } from "ioredis"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mintKey } from "../layers/access/KeyFormat.js"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { ok } from "./support/Gateway.js"
import { until } from "./support/Polling.js"
import { type GatewayProcess, spawnEnv, spawnGateway } from "./support/Process.js"
import { createTestDatabase, type TestDatabase } from "./support/TestDatabase.js"

let db: TestDatabase
let upstream: FakeUpstream
const adminKey = mintKey("admin").raw
const encryptionKey = randomBytes(32).toString("base64")
const dirs: Array<string> = []
const running: Array<GatewayProcess> = []
let platformId = ""
let userKey = ""
type Store = "postgres" | "redis"
const STORES: ReadonlyArray<Store> = process.env.REDIS_URL ? ["postgres", "redis"] : ["postgres"]
let redis: Redis | undefined

const start = async (label: string, store: Store = "postgres") => {
  const dataDir = mkdtempSync(join(tmpdir(), "gateway-fleet-"))
  dirs.push(dataDir)
  const gw = await spawnGateway({
    label,
    entry: "bundle",
    env: spawnEnv({ databaseUrl: db.url, dataDir, adminKey, encryptionKey }, {
      DATABASE_POOL_SIZE: "6",
      GATEWAY_CALL_SWEEP: "300ms",
      GATEWAY_CALL_RECORDS: "true",
      GATEWAY_CALL_RECORD_STORE: store,
      REDIS_URL: store === "redis" ? process.env.REDIS_URL : undefined
    })
  })
  running.push(gw)
  return { gw, dataDir }
}

/** SIGKILL, then its disk goes too. */
const destroy = async (instance: { gw: GatewayProcess; dataDir: string }) => {
  process.kill(instance.gw.pid, "SIGKILL")
  await instance.gw.stop()
  rmSync(instance.dataDir, { recursive: true, force: true })
}

beforeAll(async () => {
  db = await createTestDatabase()
  db.pool.on("connect", (client) => client.on("error", () => undefined))
  upstream = await startFakeOpenAi()
  const { gw } = await start("fleet-setup")
  ok(await gw.call("POST", "/v1/admin/providers", { key: adminKey, body: { slug: "up", kind: "openai", base_url: upstream.url } }))
  ok(await gw.call("POST", "/v1/admin/models", {
    key: adminKey,
    body: { slug: "m", providers: [{ provider: "up", provider_model_id: "m-1", input_usd_per_mtok: 3, output_usd_per_mtok: 7 }] }
  }))
  const platform = ok(await gw.call("POST", "/v1/admin/platforms", { key: adminKey, body: { name: "fleet" } }), 201).body
  platformId = platform.platform.id
  const platformKey = platform.api_key.raw_key as string
  ok(await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/up`, { key: platformKey, body: { api_key: "sk-up" } }))
  ok(await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: adminKey, body: { amount_usd: 100 } }))
  const user = ok(await gw.call("POST", `/v1/platforms/${platformId}/end-users`, { key: platformKey, body: { external_id: "u" } }), 201).body
  ok(await gw.call("POST", `/v1/platforms/${platformId}/end-users/${user.id}/budget`, { key: platformKey, body: { max_usd: 50 } }), 201)
  userKey = user.api_key.raw_key
  await gw.stop()
}, 120_000)

afterAll(async () => {
  await Promise.all(running.map((gw) => gw.stop()))
  if (redis !== undefined) {
    const keys = await redis.keys(`gw:call-records:${await databaseId()}:*`)
    if (keys.length > 0) await redis.del(...keys)
    redis.disconnect()
  }
  await upstream?.close()
  await db?.drop()
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
}, 60_000)

/** One chat call; the id when its answer arrived in full (a stream: through `data: [DONE]`), else null. */
const call = async (baseUrl: string, stream: boolean, signal?: AbortSignal): Promise<string | null> => {
  try {
    const res = await fetch(`${baseUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${userKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "count the fleet" }], stream }),
      ...(signal === undefined ? {} : { signal })
    })
    const text = await res.text()
    if (res.status !== 200) return null
    if (!stream) return JSON.parse(text).id
    if (!text.endsWith("data: [DONE]\n\n")) return null
    return JSON.parse(text.split("\n\n")[0]!.slice("data: ".length)).id
  } catch {
    return null // cut by the crash
  }
}

const databaseId = async () => (await db.pool.query("SELECT id::text AS id FROM database_identity")).rows[0].id as string

/** The call records of every instance, in the store's own terms. */
const recordCount = async (store: Store): Promise<number> => {
  if (store === "postgres") return (await db.pool.query("SELECT count(*)::int AS n FROM call_records")).rows[0].n as number
  redis ??= new Redis(process.env.REDIS_URL!)
  const prefix = `gw:call-records:${await databaseId()}:`
  const hashes = (await redis.keys(`${prefix}*`)).filter((key) => key !== `${prefix}instances`)
  const sizes = await Promise.all(hashes.map((key) => redis!.hlen(key)))
  return sizes.reduce((a, b) => a + b, 0)
}

const ledger = async (store: Store) => {
  const q = async (text: string) => (await db.pool.query(text, [platformId])).rows
  // The records first: a record goes only after its settlement commits, so the money read after
  // them holds every settlement of a record already gone.
  const records = await recordCount(store)
  const [logs, debits, wallet, budget] = await Promise.all([
    q("SELECT id::text, status, prompt_tokens, completion_tokens, estimated_cost_usd::text AS cost, metadata->>'request_id' AS request_id FROM inference_logs WHERE platform_id = $1"),
    q("SELECT metadata->>'log_id' AS log_id, amount_usd::text AS amount FROM budget_transactions WHERE platform_id = $1 AND type = 'debit'"),
    q("SELECT metadata->>'log_id' AS log_id, amount_usd::text AS amount FROM platform_wallet_transactions WHERE platform_id = $1 AND type = 'debit'"),
    q("SELECT used_usd::text AS used FROM budgets WHERE platform_id = $1")
  ])
  return { logs, debits, wallet, used: budget[0]!.used as string, records }
}

/** Exact decimal sums of USD strings (at most 10 places), as integers of 1e-10 USD. */
const units = (usd: string) => {
  const [whole, fraction = ""] = usd.split(".")
  return BigInt(whole!) * 10_000_000_000n + BigInt(fraction.padEnd(10, "0"))
}
const total = (rows: ReadonlyArray<{ readonly amount?: string; readonly cost?: string }>) =>
  rows.reduce((sum, row) => sum + units((row.amount ?? row.cost)!), 0n)

/** Every log row has exactly one budget debit and one wallet debit naming it; the sums agree. */
const expectReconciled = (l: Awaited<ReturnType<typeof ledger>>) => {
  const ids = l.logs.map((row) => row.id).sort()
  expect(l.debits.map((row) => row.log_id).sort()).toEqual(ids)
  expect(l.wallet.map((row) => row.log_id).sort()).toEqual(ids)
  expect(total(l.debits)).toBe(total(l.logs))
  expect(total(l.wallet)).toBe(total(l.logs))
  expect(units(l.used)).toBe(total(l.logs))
}

describe.each(STORES)("call records in %s", (store) => {
  it("SIGKILL under load, its disk deleted: every call answered in full is billed exactly once; the rest are settled, none pending", async () => {
    const doomed = await start("fleet-doomed", store)
    const answered: Array<string> = []
    let stop = false
    const worker = async (n: number) => {
      while (!stop) {
        const id = await call(doomed.gw.baseUrl, n % 2 === 0)
        if (id === null) return
        answered.push(id)
      }
    }
    const workers = Array.from({ length: 12 }, (_, n) => worker(n))
    await until(async () => answered.length, (n) => n >= 150, 30_000)
    await destroy(doomed)
    stop = true
    await Promise.all(workers)
    expect(answered.length).toBeGreaterThanOrEqual(150)

    // A fresh instance on a fresh disk finishes the dead one's work.
    await start("fleet-fresh", store)
    const after = await until(() => ledger(store), (l) => l.records === 0, 30_000)
    expect(after.records).toBe(0)
    const byRequest = new Map<string, number>()
    for (const row of after.logs) byRequest.set(row.request_id, (byRequest.get(row.request_id) ?? 0) + 1)
    for (const id of answered) expect(byRequest.get(id), id).toBe(1)
    for (const row of after.logs.filter((r) => answered.includes(r.request_id))) expect(row.status).toBe("success")
    expectReconciled(after)
  }, 120_000)

  it("a stream cut by the crash is settled by another instance as interrupted, its prompt billed", async () => {
    await start("fleet-survivor", store)
    const doomed = await start("fleet-doomed-stream", store)
    upstream.setBehavior({ reply: "one two three four five six seven eight", chunkDelayMs: 400 })
    const before = (await ledger(store)).logs.length
    try {
      const res = await fetch(`${doomed.gw.baseUrl}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${userKey}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "a long answer please" }], stream: true })
      })
      const reader = res.body!.getReader()
      const first = await reader.read() // the answer has started
      expect(first.done).toBe(false)
      const id = JSON.parse(new TextDecoder().decode(first.value).split("\n\n")[0]!.slice("data: ".length)).id as string
      // Past GATEWAY_CALL_RECORD_AFTER (250 ms) a running call is on record with what it comes to if cut.
      await until(() => recordCount(store), (n) => n === 1, 10_000)
      await destroy(doomed)
      await reader.read().catch(() => undefined)

      const after = await until(() => ledger(store), (l) => l.records === 0 && l.logs.length === before + 1, 20_000)
      const cut = after.logs.find((row) => row.request_id === id)
      expect(cut).toMatchObject({ status: "interrupted", completion_tokens: 0 })
      expect(cut!.prompt_tokens).toBeGreaterThan(0)
      expect(units(cut!.cost)).toBeGreaterThan(0n)
      expectReconciled(after)
    } finally {
      upstream.reset()
    }
  }, 120_000)
})
