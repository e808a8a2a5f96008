// The one-statement settlement: the common group written by the database function
// settle_at_once in one round trip and its own transaction (Settlements tries it first). A
// function rather than the statement sent as text: PL/pgSQL parses and plans its statement once
// per connection and keeps the plan, where the same statement sent as text was parsed, analysed
// and planned for every group. Its input (atOnceRowOf, a JSON array) and its answer (whether it
// wrote the group; false: it wrote nothing, and the transaction does) are a contract between
// every instance on the database: the installer replaces the one definition for all of them, so
// a change of either takes a new function name.
//
// It writes the common case only: every budget of the group is the one admission saw (same id,
// same period, active), no debit takes a budget across its low-balance threshold, and no
// endpoint of the group's platforms wants budget.debited. Then no period reset, webhook event or
// display charge is due (the caller leaves display charges and ended periods to the
// transaction). The budgets are locked first (in end user order, as every settlement path locks
// them); the ledger rows' before/after values follow from the updated rows (RETURNING), so they
// chain whatever committed in between.
import { PgClient } from "@effect/sql-pg"
import { Effect } from "effect"
import { sqlDec } from "../lib/Money.js"
import { atOnceLogInsert } from "./InferenceLogs.js"
import type { Settlement } from "./Settlement.js"

/**
 * Whether a settlement can go by the one statement, as far as it tells by itself: its budget as
 * admission saw it is known and its period had not ended by the call's end, it charges no display
 * ledger (the display rules are applied in JS by the transaction), and its billing status follows
 * from its cost (settle_at_once writes no other), and it releases no budget reservation (the
 * transaction deletes those with the debit).
 */
export const atOnceCandidate = (s: Settlement) =>
  s.displaySettings?.enabled !== true && s.log.billing_status === undefined && s.reservationId === undefined && (
    s.endUserId === null ||
    s.budget === null ||
    (s.budget !== undefined && (s.budget.periodEnd === null || s.at.getTime() < s.budget.periodEnd.getTime()))
  )

/** A settlement as the function reads it (jsonb_to_recordset); one literal, a single small object. */
const atOnceRowOf = (s: Settlement) => ({
  id: s.id,
  platform_id: s.platformId,
  end_user_id: s.endUserId,
  cost: sqlDec(s.costUsd),
  at: s.at.toISOString(),
  request_type: s.log.request_type,
  provider_id: s.log.provider_id,
  model_id: s.log.model_id,
  model_slug: s.log.model_slug,
  provider_model_id: s.log.provider_model_id,
  prompt_tokens: s.log.prompt_tokens,
  completion_tokens: s.log.completion_tokens,
  total_tokens: s.log.total_tokens,
  latency_ms: s.log.latency_ms,
  status: s.log.status,
  error_message: s.log.error_message,
  token_count_method: s.log.token_count_method,
  metadata: s.log.metadata,
  details: s.details,
  actor_type: s.actor.type,
  actor_key_id: s.actor.keyId,
  budget_id: s.budget?.id ?? null,
  period_start: s.budget?.periodStart.toISOString() ?? null
})

/**
 * The group in one statement: true when the function wrote it, false when a condition failed and
 * it wrote nothing. `withRecords`: when it wrote them, the settlements' call records go with them
 * (CallRecords). Off, `synchronousCommit` lets the commit return before its WAL flush:
 * set_config(..., true) lasts until the statement's own transaction commits.
 */
export const settleAtOnce = (sql: PgClient.PgClient, settlements: ReadonlyArray<Settlement>, synchronousCommit: boolean, withRecords: boolean) => {
  const rows = JSON.stringify(settlements.map(atOnceRowOf))
  const statement = withRecords
    ? sql<{ readonly ok: boolean }>`WITH settled AS (
        SELECT set_config('synchronous_commit', CASE WHEN ${synchronousCommit} THEN current_setting('synchronous_commit') ELSE 'off' END, true),
          settle_at_once(${rows}::jsonb) AS ok
      ),
      recorded AS (
        DELETE FROM call_records WHERE (SELECT ok FROM settled)
          AND id IN (SELECT jsonb_array_elements_text(${JSON.stringify(settlements.map((s) => s.id))}::jsonb)::uuid)
      )
      SELECT ok FROM settled`
    : synchronousCommit
    ? sql<{ readonly ok: boolean }>`SELECT settle_at_once(${rows}::jsonb) AS ok`
    : sql<{ readonly ok: boolean }>`SELECT set_config('synchronous_commit', 'off', true), settle_at_once(${rows}::jsonb) AS ok`
  return Effect.map(statement, ([row]) => row?.ok === true)
}

/** The function's body: what Postgres keeps as its source (pg_proc.prosrc). */
export const SETTLE_AT_ONCE_BODY = `
    DECLARE
      written boolean;
    BEGIN
      WITH x AS (
        SELECT * FROM ROWS FROM (jsonb_to_recordset(settlements) AS (
          id uuid, platform_id uuid, end_user_id uuid, cost numeric, at timestamptz, request_type text,
          provider_id uuid, model_id uuid, model_slug text, provider_model_id text, prompt_tokens int,
          completion_tokens int, total_tokens int, latency_ms int, status text, error_message text,
          token_count_method text, metadata jsonb, details jsonb, actor_type text, actor_key_id text,
          budget_id uuid, period_start timestamptz)) WITH ORDINALITY AS x(id, platform_id, end_user_id, cost, at,
          request_type, provider_id, model_id, model_slug, provider_model_id, prompt_tokens, completion_tokens,
          total_tokens, latency_ms, status, error_message, token_count_method, metadata, details, actor_type,
          actor_key_id, budget_id, period_start, i)),
      lk AS (SELECT b.* FROM budgets b
        WHERE b.end_user_id IN (SELECT end_user_id FROM x WHERE end_user_id IS NOT NULL) AND b.deleted_at IS NULL
        ORDER BY b.end_user_id FOR UPDATE),
      ok AS (SELECT
        NOT EXISTS (SELECT 1 FROM x LEFT JOIN lk ON lk.end_user_id = x.end_user_id
          WHERE x.end_user_id IS NOT NULL AND ((x.budget_id IS NULL) <> (lk.id IS NULL)
            OR lk.id <> x.budget_id OR lk.period_start <> x.period_start OR NOT lk.is_active))
        AND NOT EXISTS (SELECT 1 FROM lk JOIN (SELECT budget_id, sum(cost) AS total FROM x GROUP BY budget_id) t
            ON t.budget_id = lk.id
          WHERE lk.low_balance_armed AND lk.low_balance_threshold IS NOT NULL
            AND lk.max_usd - lk.used_usd > lk.low_balance_threshold
            AND lk.max_usd - lk.used_usd - t.total <= lk.low_balance_threshold)
        AND NOT EXISTS (SELECT 1 FROM webhook_endpoints ep
          WHERE ep.platform_id IN (SELECT platform_id FROM x WHERE budget_id IS NOT NULL) AND ep.is_active
            AND 'budget.debited' = ANY(ep.event_types)) AS ok),
      ins AS (${atOnceLogInsert}
        RETURNING id),
      fresh AS (SELECT x.* FROM x JOIN ins USING (id) WHERE x.cost > 0),
      deb AS (SELECT fresh.*, sum(fresh.cost) OVER (PARTITION BY fresh.budget_id ORDER BY fresh.i) AS through
        FROM fresh WHERE fresh.budget_id IS NOT NULL),
      bt AS (SELECT budget_id, sum(cost) AS total, (array_agg(at ORDER BY i DESC))[1] AS last_at FROM deb GROUP BY budget_id),
      upd AS (UPDATE budgets b SET used_usd = b.used_usd + bt.total, updated_at = bt.last_at
        FROM bt WHERE b.id = bt.budget_id
        RETURNING b.id, b.max_usd, b.used_usd),
      led AS (INSERT INTO budget_transactions (budget_id, platform_id, type, amount_usd, max_usd_before, max_usd_after,
          used_usd_before, used_usd_after, reason, metadata, actor_type, actor_key_id, created_at)
        SELECT deb.budget_id, deb.platform_id, 'debit', deb.cost, upd.max_usd, upd.max_usd,
          trim_scale(upd.used_usd - bt.total + deb.through - deb.cost), trim_scale(upd.used_usd - bt.total + deb.through),
          'inference', deb.details, deb.actor_type, deb.actor_key_id, deb.at
        FROM deb JOIN upd ON upd.id = deb.budget_id JOIN bt ON bt.budget_id = deb.budget_id
        ORDER BY deb.end_user_id, deb.i),
      wt AS (SELECT platform_id, sum(cost) AS total FROM fresh GROUP BY platform_id),
      w AS (INSERT INTO platform_wallets (platform_id, balance_usd) SELECT platform_id, -total FROM wt ORDER BY platform_id
        ON CONFLICT (platform_id) DO UPDATE
          SET balance_usd = platform_wallets.balance_usd + EXCLUDED.balance_usd, updated_at = now()
        RETURNING platform_id, balance_usd),
      wd AS (SELECT fresh.*, sum(fresh.cost) OVER (PARTITION BY fresh.platform_id ORDER BY fresh.i) AS through FROM fresh),
      wl AS (INSERT INTO platform_wallet_transactions (platform_id, type, amount_usd, balance_before, balance_after, reason, metadata)
        SELECT wd.platform_id, 'debit', wd.cost, w.balance_usd + wt.total - wd.through + wd.cost,
          w.balance_usd + wt.total - wd.through, NULL, wd.details
        FROM wd JOIN w USING (platform_id) JOIN wt USING (platform_id) ORDER BY wd.i)
      SELECT ok.ok INTO written FROM ok;
      RETURN written;
    END
`

const DEFINITION = `CREATE OR REPLACE FUNCTION settle_at_once(settlements jsonb) RETURNS boolean LANGUAGE plpgsql
  AS $fn$${SETTLE_AT_ONCE_BODY}$fn$`

/** Any constant shared by every instance, apart from the other advisory locks (migrations, webhook claims). */
export const INSTALL_LOCK = 7_213_381_247

/**
 * Installs settle_at_once unless the database holds this very definition; true when it wrote it.
 * Run at start, after the migrations (Settlements, before its writer). Instances starting together
 * take turns under a transaction-scoped advisory lock: two concurrent CREATE OR REPLACE of one
 * function fail ("tuple concurrently updated"), and the second finds the first's definition.
 */
export const installSettleAtOnce: Effect.Effect<boolean, never, PgClient.PgClient> = Effect.gen(function*() {
  const sql = yield* PgClient.PgClient
  return yield* Effect.gen(function*() {
    yield* sql`SELECT pg_advisory_xact_lock(${sql.literal(String(INSTALL_LOCK))})`
    const [installed] = yield* sql<{ readonly same: boolean }>`SELECT EXISTS (SELECT 1 FROM pg_proc
        WHERE oid = to_regprocedure('settle_at_once(jsonb)') AND prosrc = ${SETTLE_AT_ONCE_BODY}) AS same`
    if (installed?.same === true) return false
    yield* sql.unsafe(DEFINITION)
    return true
  }).pipe(sql.withTransaction)
}).pipe(Effect.orDie)
