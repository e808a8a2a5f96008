// Migrations run at start; a second start on the same database is a no-op that keeps the data.
import { expect, it } from "vitest"
import { createPlatform, startGateway } from "./support/Gateway.js"
import { createTestDatabase } from "./support/TestDatabase.js"

it("applies migrations once; a second start changes nothing", async () => {
  const db = await createTestDatabase()
  try {
    const first = await startGateway({ db })
    const { platformId, platformKey } = await createPlatform(first)
    const applied = await db.pool.query("SELECT migration_id, name FROM schema_migrations ORDER BY migration_id")
    expect(applied.rows.map((r) => r.name)).toEqual(["foundation", "ledger", "webhooks", "inference", "responses", "display", "tools", "capabilities", "skills", "webhook_trace_context", "database_identity", "settle_at_once", "webhook_fair_dispatch", "ledger_backfill_order", "mcp_sessions", "call_records", "budget_reservations", "response_incomplete_reason", "model_serves", "model_agent", "messages", "usage_rollup", "reserve_counts_capability_holds", "time_ordered_ids", "ledger_seq_not_indexed"])
    // Rows written on every call take time-ordered ids by default (0028): version 7, later is larger.
    const { rows: [ids] } = await db.pool.query("SELECT uuid_v7()::text AS a, pg_sleep(0.002)::text, uuid_v7()::text AS b")
    expect(ids.a).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
    expect(ids.b > ids.a).toBe(true)
    expect(Date.now() - parseInt(ids.a.replace("-", "").slice(0, 12), 16)).toBeLessThan(60_000)
    const { rows: defaults } = await db.pool.query(`SELECT table_name, column_default FROM information_schema.columns
      WHERE column_name = 'id' AND table_name IN ('inference_logs', 'budget_transactions', 'platform_wallet_transactions', 'display_transactions')
      ORDER BY table_name`)
    expect(defaults).toEqual(["budget_transactions", "display_transactions", "inference_logs", "platform_wallet_transactions"]
      .map((table_name) => ({ table_name, column_default: "uuid_v7()" })))
    // The ledgers' seq comes from its sequence; no unique index is kept for it (0029).
    const { rows: seqKeys } = await db.pool.query("SELECT conname FROM pg_constraint WHERE conname LIKE '%\\_seq\\_key'")
    expect(seqKeys).toEqual([])
    await first.close()

    const second = await startGateway({ db })
    const again = await db.pool.query("SELECT migration_id, name FROM schema_migrations ORDER BY migration_id")
    expect(again.rows).toEqual(applied.rows)
    const res = await second.call("GET", `/v1/platforms/${platformId}`, { key: platformKey })
    expect(res.status).toBe(200)
    await second.close()
  } finally {
    await db.drop()
  }
})

it("two instances starting together on an empty database both come up (migrations take turns)", async () => {
  const db = await createTestDatabase()
  try {
    const [a, b] = await Promise.all([startGateway({ db }), startGateway({ db })])
    const applied = await db.pool.query("SELECT count(*)::int AS n FROM schema_migrations")
    expect(applied.rows[0].n).toBe(25)
    expect((await a.call("GET", "/health")).status).toBe(200)
    expect((await b.call("GET", "/health")).status).toBe(200)
    await a.close()
    await b.close()
  } finally {
    await db.drop()
  }
})
