// reserve_budget's wallet check counts the platform's open capability runs as well as its model
// calls' reservations: a run's hold is money the wallet already promised, as a run's own check
// (layers/capabilities/Capabilities.ts) counts reservations against it. Without it, a reserved
// call and an open run could together promise more than the balance, and both settling would
// take the wallet below zero. Same locks, same order, same answers otherwise (0020).
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql.unsafe(`CREATE OR REPLACE FUNCTION reserve_budget(p_id uuid, p_platform uuid, p_budget uuid, p_amount numeric, p_expires timestamptz)
    RETURNS text LANGUAGE plpgsql AS $fn$
    DECLARE
      budget_left numeric;
      wallet_left numeric;
    BEGIN
      IF p_budget IS NOT NULL THEN
        PERFORM 1 FROM budgets WHERE id = p_budget FOR UPDATE;
      END IF;
      PERFORM 1 FROM platform_wallets WHERE platform_id = p_platform FOR UPDATE;
      -- Reservations of calls whose instance died unsettled: they hold nothing any more.
      DELETE FROM budget_reservations WHERE platform_id = p_platform AND expires_at <= now();
      IF p_budget IS NOT NULL THEN
        SELECT b.max_usd - b.used_usd
            - (SELECT coalesce(sum(h.hold_usd), 0) FROM capability_runs h
                WHERE h.budget_id = p_budget AND h.state = 'open' AND h.expires_at > now())
            - (SELECT coalesce(sum(r.amount_usd), 0) FROM budget_reservations r
                WHERE r.budget_id = p_budget AND r.expires_at > now())
          INTO budget_left FROM budgets b WHERE b.id = p_budget;
        IF budget_left IS NULL OR budget_left < p_amount THEN
          RETURN 'budget_exhausted';
        END IF;
      END IF;
      SELECT w.balance_usd
          - (SELECT coalesce(sum(h.hold_usd), 0) FROM capability_runs h
              WHERE h.platform_id = p_platform AND h.state = 'open' AND h.expires_at > now())
          - (SELECT coalesce(sum(r.amount_usd), 0) FROM budget_reservations r
              WHERE r.platform_id = p_platform AND r.expires_at > now())
        INTO wallet_left FROM platform_wallets w WHERE w.platform_id = p_platform;
      IF wallet_left IS NULL OR wallet_left < p_amount THEN
        RETURN 'wallet_insufficient';
      END IF;
      INSERT INTO budget_reservations (id, platform_id, budget_id, amount_usd, expires_at)
        VALUES (p_id, p_platform, p_budget, p_amount, p_expires);
      RETURN 'reserved';
    END
    $fn$`)
})
