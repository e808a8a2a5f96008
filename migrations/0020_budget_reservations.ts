// Budget reservations: in the platform setting budget_enforcement "reserve", each admitted model
// call holds its maximum cost on the budget and the wallet until its settlement replaces it by the
// actual cost (layers/ledger/Reservations.ts). A row past expires_at holds nothing (crash release).
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE budget_reservations (
    id uuid PRIMARY KEY,
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    budget_id uuid REFERENCES budgets(id) ON DELETE CASCADE,
    amount_usd numeric NOT NULL CHECK (amount_usd >= 0),
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE INDEX budget_reservations_budget ON budget_reservations (budget_id, expires_at)`
  yield* sql`CREATE INDEX budget_reservations_platform ON budget_reservations (platform_id, expires_at)`
  // One call reserves in one statement. A function, not a statement with CTEs: the row locks
  // come first, and each statement after them reads a fresh snapshot (read committed), so the
  // sums include every reservation and debit committed by whoever held the locks before; a
  // single statement would sum on the snapshot taken before it waited. Locks in the order every
  // settlement takes them: the budget, then the wallet.
  yield* sql.unsafe(`CREATE FUNCTION reserve_budget(p_id uuid, p_platform uuid, p_budget uuid, p_amount numeric, p_expires timestamptz)
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
      SELECT w.balance_usd - (SELECT coalesce(sum(r.amount_usd), 0) FROM budget_reservations r
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
