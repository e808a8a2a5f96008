// Usage rollups of the inference log (GET /v1/platforms/{pid}/usage, GET /v1/admin/usage):
// `usage_hourly` per platform, UTC hour, model, provider and request type (small whatever the
// number of end users), and `usage_daily_users` per platform, UTC day, end user, model, provider
// and request type (for reports by or of end users). Statement-level triggers keep both in the
// transaction of every write of the log, so they always equal it: a late row (a settlement
// replayed after a crash) lands in its own hour, an outcome recorded afterwards (a tool call's
// status) moves its counts, a deleted row leaves. Each write statement adds one upsert per
// rollup, ordered by key (concurrent writers lock rows in the same order). What counts
// (layers/ledger/Usage.ts reads the log's edges the same way): `errors` are calls that did not
// succeed or whose settlement failed; `cost_usd` is what was charged (billing_status billed or
// estimated), the cost the budget and the wallet were debited.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

interface Rollup {
  readonly table: string
  readonly constraint: string
  /** The time column and the grain it truncates created_at to. */
  readonly time: "hour" | "day"
  readonly dimensions: ReadonlyArray<string>
}

const HOURLY: Rollup = {
  table: "usage_hourly",
  constraint: "usage_hourly_key",
  time: "hour",
  dimensions: ["model_slug", "provider_id", "request_type"]
}
const DAILY_USERS: Rollup = {
  table: "usage_daily_users",
  constraint: "usage_daily_users_key",
  time: "day",
  dimensions: ["end_user_id", "model_slug", "provider_id", "request_type"]
}
const COUNTS = ["calls", "errors", "input_tokens", "output_tokens", "cost_usd"]

const keyOf = (rollup: Rollup) => ["platform_id", rollup.time, ...rollup.dimensions].join(", ")

/** A rollup's rows from a set of log rows `r`, negated with `sign` "-". */
const rolledUp = (rollup: Rollup, rows: string, sign: "" | "-") => `SELECT r.platform_id,
      date_trunc('${rollup.time}', r.created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS ${rollup.time},
      ${rollup.dimensions.map((d) => `r.${d}`).join(", ")},
      ${sign}count(*) AS calls,
      ${sign}count(*) FILTER (WHERE r.status <> 'success' OR r.billing_status = 'failed') AS errors,
      ${sign}coalesce(sum(r.prompt_tokens), 0) AS input_tokens,
      ${sign}coalesce(sum(r.completion_tokens), 0) AS output_tokens,
      ${sign}coalesce(sum(r.estimated_cost_usd) FILTER (WHERE r.billing_status IN ('billed', 'estimated')), 0) AS cost_usd
    FROM ${rows} r GROUP BY ${Array.from({ length: 2 + rollup.dimensions.length }, (_, i) => i + 1).join(", ")}`

/** Adds the deltas of `source` (rows of the rollup's columns, a key in several rows) to the rollup. */
const upsert = (rollup: Rollup, source: string) => `INSERT INTO ${rollup.table} AS u (${keyOf(rollup)}, ${COUNTS.join(", ")})
    SELECT ${keyOf(rollup)}, ${COUNTS.map((c) => `sum(${c})`).join(", ")}
    FROM (${source}) d GROUP BY ${keyOf(rollup)} ORDER BY ${keyOf(rollup)}
    ON CONFLICT ON CONSTRAINT ${rollup.constraint} DO UPDATE SET
      ${COUNTS.map((c) => `${c} = u.${c} + EXCLUDED.${c}`).join(", ")}`

/** The columns the rollups read: an update that changes none of them changes nothing. */
const READ = ["platform_id", "created_at", "end_user_id", "model_slug", "provider_id", "request_type", "status", "billing_status",
  "prompt_tokens", "completion_tokens", "estimated_cost_usd"]
const CHANGED = `(${READ.map((c) => `o.${c}`).join(", ")}) IS DISTINCT FROM (${READ.map((c) => `n.${c}`).join(", ")})`

const onUpdate = (rollup: Rollup) =>
  upsert(
    rollup,
    `${rolledUp(rollup, `(SELECT n.* FROM added n JOIN removed o USING (id) WHERE ${CHANGED})`, "")}
      UNION ALL ${rolledUp(rollup, `(SELECT o.* FROM removed o JOIN added n USING (id) WHERE ${CHANGED})`, "-")}`
  )

/** A delete only subtracts (an upsert could recreate a row of a platform being deleted). */
const onDelete = (rollup: Rollup) => `UPDATE ${rollup.table} u SET ${COUNTS.map((c) => `${c} = u.${c} + d.${c}`).join(", ")}
    FROM (${rolledUp(rollup, "removed", "-")}) d
    WHERE u.platform_id = d.platform_id AND u.${rollup.time} = d.${rollup.time}
      AND ${rollup.dimensions.map((c) => `u.${c} IS NOT DISTINCT FROM d.${c}`).join(" AND ")}`

const fn = (name: string, body: ReadonlyArray<string>) => `CREATE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      ${body.map((statement) => `${statement};`).join("\n      ")}
      RETURN NULL;
    END $fn$`

const table = (rollup: Rollup) => `CREATE TABLE ${rollup.table} (
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    ${rollup.time} timestamptz NOT NULL,
    ${rollup.dimensions.map((d) => `${d} ${d === "model_slug" || d === "request_type" ? "text" : "uuid"}${d === "request_type" ? " NOT NULL" : ""}`).join(",\n    ")},
    calls bigint NOT NULL,
    errors bigint NOT NULL,
    input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cost_usd numeric NOT NULL,
    CONSTRAINT ${rollup.constraint} UNIQUE NULLS NOT DISTINCT (${keyOf(rollup)})
  )`

const ROLLUPS = [HOURLY, DAILY_USERS]

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  for (const rollup of ROLLUPS) yield* sql.unsafe(table(rollup))
  // The operator's reads span every platform: by time.
  yield* sql`CREATE INDEX usage_hourly_hour ON usage_hourly (hour)`
  yield* sql`CREATE INDEX usage_daily_users_day ON usage_daily_users (day)`

  yield* sql.unsafe(fn("usage_rollups_insert", ROLLUPS.map((r) => upsert(r, rolledUp(r, "added", "")))))
  yield* sql.unsafe(fn("usage_rollups_update", ROLLUPS.map(onUpdate)))
  yield* sql.unsafe(fn("usage_rollups_delete", ROLLUPS.map(onDelete)))
  yield* sql.unsafe(fn("usage_rollups_truncate", ROLLUPS.map((r) => `DELETE FROM ${r.table}`)))

  // The triggers and the backfill in one transaction: CREATE TRIGGER locks the log against
  // writes until commit, so no row is counted twice or missed.
  yield* sql`CREATE TRIGGER inference_logs_usage_insert AFTER INSERT ON inference_logs
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION usage_rollups_insert()`
  yield* sql`CREATE TRIGGER inference_logs_usage_update AFTER UPDATE ON inference_logs
    REFERENCING OLD TABLE AS removed NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION usage_rollups_update()`
  yield* sql`CREATE TRIGGER inference_logs_usage_delete AFTER DELETE ON inference_logs
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION usage_rollups_delete()`
  yield* sql`CREATE TRIGGER inference_logs_usage_truncate AFTER TRUNCATE ON inference_logs
    FOR EACH STATEMENT EXECUTE FUNCTION usage_rollups_truncate()`
  for (const rollup of ROLLUPS) yield* sql.unsafe(upsert(rollup, rolledUp(rollup, "inference_logs", "")))
})
