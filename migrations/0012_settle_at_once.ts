// The one-statement settlement (layers/ledger/Settlements.ts, commitAtOnce) as a function: PL/pgSQL
// parses and plans its statement once per connection and keeps the plan, where the same
// statement sent as text was parsed, analysed and planned for every group (a quarter of
// Postgres's work per settlement). `settlements` is a JSON array of the settlements as
// Settlements' atOnceRowOf writes them; the answer says whether it wrote them (false: it wrote
// nothing, and the transaction does).
//
// It writes the common case only: every budget of the group is the one admission saw (same id,
// same period, active), no debit takes a budget across its low-balance threshold, and no
// endpoint of the group's platforms wants budget.debited. Then no period reset, webhook event or
// display charge is due (the caller leaves display charges and ended periods to the
// transaction). The budgets are locked first (in end user order, as every settlement path locks
// them); the ledger rows' before/after values follow from the updated rows (RETURNING), so they
// chain whatever committed in between.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE FUNCTION settle_at_once(settlements jsonb) RETURNS boolean LANGUAGE plpgsql AS $fn$
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
      ins AS (INSERT INTO inference_logs (id, platform_id, end_user_id, request_type, provider_id, model_id, model_slug,
          provider_model_id, prompt_tokens, completion_tokens, total_tokens, latency_ms, estimated_cost_usd, status,
          error_message, token_count_method, billing_status, metadata, created_at)
        SELECT x.id, x.platform_id, x.end_user_id, x.request_type, x.provider_id, x.model_id, x.model_slug,
          x.provider_model_id, x.prompt_tokens, x.completion_tokens, x.total_tokens, x.latency_ms, x.cost, x.status,
          x.error_message, x.token_count_method, CASE WHEN x.cost > 0 THEN 'billed' ELSE 'not_billed' END, x.metadata, x.at
        FROM x WHERE (SELECT ok FROM ok) ORDER BY x.i
        ON CONFLICT (id) DO NOTHING
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
  $fn$`
})
