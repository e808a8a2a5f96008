// Usage by the hour (GET /v1/platforms/{pid}/usage, GET /v1/admin/usage): the inference log
// rolled up per platform, UTC hour, end user, model, provider and request type, kept by
// statement-level triggers in the transaction of every write of the log, so it always equals
// the log: a late row (a settlement replayed after a crash) lands in its own hour, an outcome
// recorded afterwards (a tool call's status) moves its counts, and a deleted row leaves.
// Each write statement adds one upsert, ordered by key (concurrent writers lock rows in the
// same order). The rules of what counts (layers/ledger/Usage.ts reads them the same way):
// `errors` are calls that did not succeed or whose settlement failed; `cost_usd` is what was
// charged (billing_status billed or estimated), the cost the budget and the wallet were debited.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/** The rollup's columns from a set of log rows `r`, grouped by its key. */
const rolledUp = (rows: string, sign: "" | "-") => `SELECT r.platform_id,
      date_trunc('hour', r.created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour,
      r.end_user_id, r.model_slug, r.provider_id, r.request_type,
      ${sign}count(*) AS calls,
      ${sign}count(*) FILTER (WHERE r.status <> 'success' OR r.billing_status = 'failed') AS errors,
      ${sign}coalesce(sum(r.prompt_tokens), 0) AS input_tokens,
      ${sign}coalesce(sum(r.completion_tokens), 0) AS output_tokens,
      ${sign}coalesce(sum(r.estimated_cost_usd) FILTER (WHERE r.billing_status IN ('billed', 'estimated')), 0) AS cost_usd
    FROM ${rows} r GROUP BY 1, 2, 3, 4, 5, 6`

const COLUMNS = "platform_id, hour, end_user_id, model_slug, provider_id, request_type, calls, errors, input_tokens, output_tokens, cost_usd"
const KEY = "platform_id, hour, end_user_id, model_slug, provider_id, request_type"

/** Adds the deltas of `source` (rows of the rollup's columns, a key in several rows) to the rollup. */
const upsert = (source: string) => `INSERT INTO usage_hourly AS u (${COLUMNS})
    SELECT ${KEY}, sum(calls), sum(errors), sum(input_tokens), sum(output_tokens), sum(cost_usd)
    FROM (${source}) d GROUP BY ${KEY} ORDER BY ${KEY}
    ON CONFLICT ON CONSTRAINT usage_hourly_key DO UPDATE SET
      calls = u.calls + EXCLUDED.calls, errors = u.errors + EXCLUDED.errors,
      input_tokens = u.input_tokens + EXCLUDED.input_tokens, output_tokens = u.output_tokens + EXCLUDED.output_tokens,
      cost_usd = u.cost_usd + EXCLUDED.cost_usd`

/** The columns the rollup reads: an update that changes none of them changes nothing. */
const COUNTED = `(o.platform_id, o.created_at, o.end_user_id, o.model_slug, o.provider_id, o.request_type, o.status,
    o.billing_status, o.prompt_tokens, o.completion_tokens, o.estimated_cost_usd)
  IS DISTINCT FROM (n.platform_id, n.created_at, n.end_user_id, n.model_slug, n.provider_id, n.request_type, n.status,
    n.billing_status, n.prompt_tokens, n.completion_tokens, n.estimated_cost_usd)`

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE usage_hourly (
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    hour timestamptz NOT NULL,
    end_user_id uuid,
    model_slug text,
    provider_id uuid,
    request_type text NOT NULL,
    calls bigint NOT NULL,
    errors bigint NOT NULL,
    input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cost_usd numeric NOT NULL,
    CONSTRAINT usage_hourly_key UNIQUE NULLS NOT DISTINCT (platform_id, hour, end_user_id, model_slug, provider_id, request_type)
  )`
  // The operator's reads span every platform: by hour.
  yield* sql`CREATE INDEX usage_hourly_hour ON usage_hourly (hour)`

  yield* sql.unsafe(`CREATE FUNCTION usage_hourly_insert() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      ${upsert(rolledUp("added", ""))};
      RETURN NULL;
    END $fn$`)
  yield* sql.unsafe(`CREATE FUNCTION usage_hourly_update() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      ${upsert(`${rolledUp(`(SELECT n.* FROM added n JOIN removed o USING (id) WHERE ${COUNTED})`, "")}
        UNION ALL ${rolledUp(`(SELECT o.* FROM removed o JOIN added n USING (id) WHERE ${COUNTED})`, "-")}`)};
      RETURN NULL;
    END $fn$`)
  // A delete only subtracts (an upsert could recreate a row of a platform being deleted).
  yield* sql.unsafe(`CREATE FUNCTION usage_hourly_delete() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      UPDATE usage_hourly u SET calls = u.calls + d.calls, errors = u.errors + d.errors,
          input_tokens = u.input_tokens + d.input_tokens, output_tokens = u.output_tokens + d.output_tokens,
          cost_usd = u.cost_usd + d.cost_usd
        FROM (${rolledUp("removed", "-")}) d
        WHERE u.platform_id = d.platform_id AND u.hour = d.hour AND u.end_user_id IS NOT DISTINCT FROM d.end_user_id
          AND u.model_slug IS NOT DISTINCT FROM d.model_slug AND u.provider_id IS NOT DISTINCT FROM d.provider_id
          AND u.request_type = d.request_type;
      RETURN NULL;
    END $fn$`)
  yield* sql.unsafe(`CREATE FUNCTION usage_hourly_truncate() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      DELETE FROM usage_hourly;
      RETURN NULL;
    END $fn$`)

  // The triggers and the backfill in one transaction: CREATE TRIGGER locks the log against
  // writes until commit, so no row is counted twice or missed.
  yield* sql`CREATE TRIGGER inference_logs_usage_insert AFTER INSERT ON inference_logs
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION usage_hourly_insert()`
  yield* sql`CREATE TRIGGER inference_logs_usage_update AFTER UPDATE ON inference_logs
    REFERENCING OLD TABLE AS removed NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION usage_hourly_update()`
  yield* sql`CREATE TRIGGER inference_logs_usage_delete AFTER DELETE ON inference_logs
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION usage_hourly_delete()`
  yield* sql`CREATE TRIGGER inference_logs_usage_truncate AFTER TRUNCATE ON inference_logs
    FOR EACH STATEMENT EXECUTE FUNCTION usage_hourly_truncate()`
  yield* sql.unsafe(upsert(rolledUp("inference_logs", "")))
})
