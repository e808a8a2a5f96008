// `npx tsx bench/usage.ts`: the usage reports over a generated inference log, on a fresh database
// of the DATABASE_URL server (default the local one), dropped afterwards. BENCH_USAGE_ROWS log rows
// (default a million) of one platform over the last 30 days, from BENCH_USAGE_USERS end users
// (default 200), four models on two providers, one call in fifty an error. Prints, as Markdown:
// each report's EXPLAIN ANALYZE execution time (median of three), the same grouping computed from
// the log itself for comparison, and what the rollups' trigger adds to a settlement group's log
// insert (64 rows, the triggers on and off in turns). Figures only: nothing is asserted.
import { ConfigProvider, Layer, ManagedRuntime } from "effect"
import { PgClient } from "@effect/sql-pg"
import { randomBytes, randomUUID } from "node:crypto"
import pg from "pg"
import { insertLogRows, type LogRowWithId } from "../layers/ledger/InferenceLogs.js"
import { onePlatform, reportStatement, type UsageQuery } from "../layers/ledger/Usage.js"
import { InfraLive } from "../src/App.js"

const ROWS = Number(process.env.BENCH_USAGE_ROWS ?? 1_000_000)
const USERS = Number(process.env.BENCH_USAGE_USERS ?? 200)
const GROUP_ROWS = 64
const GROUPS_PER_TURN = 100
const TURNS = 3
const serverUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"

const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((x, y) => x - y)
  return sorted[Math.floor(sorted.length / 2)]!
}

const main = async () => {
  const name = `gw_usage_bench_${randomBytes(4).toString("hex")}`
  const admin = new pg.Client({ connectionString: serverUrl })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${name}`)
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  const runtime = ManagedRuntime.make(InfraLive.pipe(
    Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["DATABASE_URL", url.toString()]]))))
  ))
  const db = new pg.Client({ connectionString: url.toString() })
  try {
    const sql = await runtime.runPromise(PgClient.PgClient) // migrated
    await db.connect()
    const [{ id: platformId }] = (await db.query("INSERT INTO platforms (name) VALUES ('usage bench') RETURNING id")).rows
    const providers = (await db.query(`INSERT INTO providers (slug, kind, base_url)
      VALUES ('bench-a', 'mock', 'http://a.invalid'), ('bench-b', 'mock', 'http://b.invalid') RETURNING id`)).rows.map((r) => r.id)
    await db.query(`INSERT INTO end_users (platform_id, external_id, display_name)
      SELECT $1, 'user-' || i, 'User ' || i FROM generate_series(1, $2) i`, [platformId, USERS])
    const users = (await db.query("SELECT id FROM end_users WHERE platform_id = $1 ORDER BY external_id", [platformId])).rows.map((r) => r.id)

    // Rows spread evenly over the 30 days up to now; users, models and errors drawn independently.
    let started = performance.now()
    await db.query(`INSERT INTO inference_logs (platform_id, end_user_id, request_type, provider_id, model_slug,
        prompt_tokens, completion_tokens, total_tokens, estimated_cost_usd, status, token_count_method, billing_status, created_at)
      SELECT $1, ($2::uuid[])[1 + (i::bigint * 7919) % $4], 'chat.completion', ($3::uuid[])[1 + (i / 3) % 4 / 2], 'model-' || (i / 3) % 4,
        100 + i % 50, 200 + i % 70, 300 + i % 50 + i % 70,
        CASE WHEN i % 50 = 0 THEN 0 ELSE ((100 + i % 50) * 3 + (200 + i % 70) * 15) / 1000000.0 END,
        CASE WHEN i % 50 = 0 THEN 'error' ELSE 'success' END, 'reported',
        CASE WHEN i % 50 = 0 THEN 'not_billed' ELSE 'billed' END,
        now() - interval '30 days' * (i::float8 / $5)
      FROM generate_series(1, $5) i`, [platformId, users, providers, USERS, ROWS])
    const loadSeconds = (performance.now() - started) / 1000
    await db.query("VACUUM ANALYZE inference_logs")
    await db.query("VACUUM ANALYZE usage_hourly")
    const sizes = (await db.query(`SELECT (SELECT count(*) FROM inference_logs)::int AS logs,
      pg_size_pretty(pg_total_relation_size('inference_logs')) AS logs_size,
      (SELECT count(*) FROM usage_hourly)::int AS hourly, pg_size_pretty(pg_total_relation_size('usage_hourly')) AS hourly_size,
      (SELECT count(*) FROM usage_daily_users)::int AS daily, pg_size_pretty(pg_total_relation_size('usage_daily_users')) AS daily_size`)).rows[0]

    const explain = async (text: string, params: ReadonlyArray<unknown>) => {
      const times: Array<number> = []
      await db.query(text, params as Array<unknown>) // warm
      for (let i = 0; i < 3; i++) {
        const [row] = (await db.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, params as Array<unknown>)).rows
        times.push(row["QUERY PLAN"][0]["Execution Time"])
      }
      return median(times)
    }

    const to = new Date()
    const from = new Date(to.getTime() - 30 * 24 * 3_600_000)
    const reports: ReadonlyArray<readonly [string, UsageQuery]> = [
      ["group_by=day", { group_by: "day", limit: 1000 }],
      ["group_by=hour", { group_by: "hour", limit: 1000 }],
      ["group_by=model", { group_by: "model", limit: 1000 }],
      ["group_by=end_user", { group_by: "end_user", limit: 1000 }],
      ["group_by=provider", { group_by: "provider", limit: 1000 }],
      ["group_by=day, end_user_id", { group_by: "day", limit: 1000, end_user_id: users[0] }]
    ]
    const fromLog: Record<string, string> = {
      "group_by=day": "date_trunc('day', created_at AT TIME ZONE 'UTC')",
      "group_by=hour": "date_trunc('hour', created_at AT TIME ZONE 'UTC')",
      "group_by=model": "model_slug",
      "group_by=end_user": "end_user_id",
      "group_by=provider": "provider_id",
      "group_by=day, end_user_id": "date_trunc('day', created_at AT TIME ZONE 'UTC')"
    }
    const lines = [
      `Usage reports over ${sizes.logs.toLocaleString("en")} log rows of one platform (${sizes.logs_size}), 30 days, ${USERS} end users,`,
      `4 models, 2 providers, generated in ${loadSeconds.toFixed(1)} s; usage_hourly holds ${sizes.hourly.toLocaleString("en")} rows (${sizes.hourly_size}),`,
      `usage_daily_users ${sizes.daily.toLocaleString("en")} rows (${sizes.daily_size}).`,
      "Range: the last 30 days, cut at arbitrary instants (whole hours or days from a rollup, the edges from the log).",
      "",
      "| report | rollups + edges (ms) | the log itself (ms) |",
      "|---|---:|---:|"
    ]
    for (const [label, query] of reports) {
      const [text, params] = reportStatement(sql, onePlatform(sql, platformId), from, to, query).compile()
      const viaRollup = await explain(text, params)
      const filter = query.end_user_id === undefined ? "" : ` AND end_user_id = '${query.end_user_id}'`
      const viaLog = await explain(`SELECT ${fromLog[label]} AS k, count(*), count(*) FILTER (WHERE status <> 'success' OR billing_status = 'failed'),
          sum(prompt_tokens), sum(completion_tokens), sum(estimated_cost_usd) FILTER (WHERE billing_status IN ('billed', 'estimated'))
        FROM inference_logs WHERE platform_id = $1 AND created_at >= $2 AND created_at < $3${filter} GROUP BY 1`, [platformId, from, to])
      lines.push(`| ${label} | ${viaRollup.toFixed(1)} | ${viaLog.toFixed(1)} |`)
    }

    // A settlement group's log insert (the statement Settlements sends), with and without the rollups' trigger.
    await db.query("SET synchronous_commit = off")
    const group = (): ReadonlyArray<LogRowWithId> => Array.from({ length: GROUP_ROWS }, (_, i) => ({
      id: randomUUID(), platform_id: platformId, end_user_id: users[i % 16]!, request_type: "chat.completion",
      provider_id: providers[i % 2]!, model_id: null, model_slug: `model-${i % 4}`, provider_model_id: null,
      prompt_tokens: 120, completion_tokens: 240, total_tokens: 360, latency_ms: 3, estimated_cost_usd: "0.00396",
      status: "success", error_message: null, token_count_method: "reported", billing_status: "billed", metadata: {},
      created_at: new Date()
    }))
    const timings: Record<"on" | "off", Array<number>> = { on: [], off: [] }
    for (let turn = 0; turn < TURNS * 2; turn++) {
      const state = turn % 2 === 0 ? "on" : "off"
      await db.query(`ALTER TABLE inference_logs ${state === "on" ? "ENABLE" : "DISABLE"} TRIGGER inference_logs_usage_insert`)
      for (let i = 0; i < GROUPS_PER_TURN; i++) {
        const [text, params] = insertLogRows(sql, group()).compile()
        started = performance.now()
        await db.query(text, params as Array<unknown>)
        timings[state].push(performance.now() - started)
      }
    }
    await db.query("ALTER TABLE inference_logs ENABLE TRIGGER inference_logs_usage_insert")
    lines.push(
      "",
      `A settlement group's log insert (${GROUP_ROWS} rows, ${GROUPS_PER_TURN * TURNS} statements each way, round trip, median):`,
      `with the rollups' trigger ${median(timings.on).toFixed(2)} ms, without ${median(timings.off).toFixed(2)} ms.`
    )
    console.log(lines.join("\n"))
  } finally {
    await db.end().catch(() => undefined)
    await runtime.dispose()
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    await admin.end()
  }
}

await main()
