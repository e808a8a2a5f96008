// The statements that write ledger rows: one change's row, and a run of planned debit rows.
import type { PgClient } from "@effect/sql-pg"
import { type BigDecimal, Effect } from "effect"
import type { BudgetTransaction } from "../../../schemas/Budgets.js"
import { sqlDec } from "../../lib/Money.js"
import type { Actor, BudgetRow, TransactionRow } from "./Rows.js"

export const insertTransaction = (
  sql: PgClient.PgClient,
  before: BudgetRow,
  after: BudgetRow,
  input: {
    readonly type: BudgetTransaction["type"]
    readonly amount: BigDecimal.BigDecimal | string
    readonly reason: string | null
    readonly metadata: Record<string, unknown>
    readonly actor: Actor
    readonly at: Date
  }
) =>
  sql<TransactionRow>`INSERT INTO budget_transactions
      (budget_id, platform_id, type, amount_usd, max_usd_before, max_usd_after, used_usd_before,
       used_usd_after, reason, metadata, actor_type, actor_key_id, created_at)
    VALUES (${after.id}, ${after.platform_id}, ${input.type},
      ${typeof input.amount === "string" ? input.amount : sqlDec(input.amount)},
      ${before.max_usd}, ${after.max_usd}, ${before.used_usd}, ${after.used_usd},
      ${input.reason}, ${sql.json(input.metadata)}, ${input.actor.type}, ${input.actor.keyId}, ${input.at})
    RETURNING *`.pipe(Effect.map((rows) => rows[0]!))

/** The debit rows of plans, in order, as one INSERT ... SELECT. */
export const insertDebits = (sql: PgClient.PgClient, rows: ReadonlyArray<Record<string, unknown>>) =>
  sql`INSERT INTO budget_transactions
      (id, budget_id, platform_id, type, amount_usd, max_usd_before, max_usd_after, used_usd_before,
       used_usd_after, reason, metadata, actor_type, actor_key_id, created_at)
    SELECT x.id, x.budget_id, x.platform_id, 'debit', x.amount, x.max_before, x.max_after, x.used_before,
      x.used_after, x.reason, x.metadata, x.actor_type, x.actor_key_id, x.created_at
    FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) AS x(i int, id uuid, budget_id uuid, platform_id uuid,
      amount numeric, max_before numeric, max_after numeric, used_before numeric, used_after numeric, reason text,
      metadata jsonb, actor_type text, actor_key_id text, created_at timestamptz)
    ORDER BY x.i`
