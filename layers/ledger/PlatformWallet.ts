// PlatformWallet: each platform's prepaid USD balance, checked before inference and debited at
// settlement. Every change writes a wallet ledger row in the same transaction.
import { PgClient } from "@effect/sql-pg"
import { BigDecimal, Effect } from "effect"
import type { PlatformWalletTransaction } from "../../schemas/Catalog.js"
import { dec, sqlDec } from "../lib/Money.js"
import { type BackfillParams, backfillPage } from "./BackfillPage.js"

interface WalletTransactionRow {
  readonly id: string
  readonly type: "topup" | "debit"
  readonly amount_usd: string
  readonly balance_before: string
  readonly balance_after: string
  readonly reason: string | null
  readonly log_id: string | null
  readonly metadata: Record<string, unknown>
  readonly created_at: Date
}

interface WalletRow {
  readonly balance_usd: string
  readonly updated_at: Date
}

export class PlatformWallet extends Effect.Service<PlatformWallet>()("gateway/PlatformWallet", {
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient

    const view = (row: WalletRow | undefined) => ({
      balance_usd: dec(row?.balance_usd ?? "0"),
      updated_at: row?.updated_at ?? new Date(0)
    })

    const get = (platformId: string) =>
      sql<WalletRow>`SELECT balance_usd::text, updated_at FROM platform_wallets WHERE platform_id = ${platformId}`.pipe(
        Effect.map((rows) => view(rows[0])),
        Effect.orDie
      )

    /**
     * Adds to the balance and writes its wallet ledger row in ONE statement: the upsert locks the
     * wallet row for the rest of the transaction, so concurrent changes serialise and before/after
     * values chain exactly.
     */
    const topup = (platformId: string, amount: BigDecimal.BigDecimal, reason: string | null) =>
      sql<WalletRow>`WITH w AS (
          INSERT INTO platform_wallets (platform_id, balance_usd) VALUES (${platformId}, ${sqlDec(amount)})
          ON CONFLICT (platform_id) DO UPDATE
            SET balance_usd = platform_wallets.balance_usd + ${sqlDec(amount)}::numeric, updated_at = now()
          RETURNING balance_usd, updated_at),
        t AS (
          INSERT INTO platform_wallet_transactions (platform_id, type, amount_usd, balance_before, balance_after, reason, metadata)
          SELECT ${platformId}, 'topup', ${sqlDec(amount)}, w.balance_usd - ${sqlDec(amount)}::numeric, w.balance_usd, ${reason}, ${sql.json({})}
          FROM w)
        SELECT balance_usd::text, updated_at FROM w`.pipe(
        Effect.map((rows) => view(rows[0])),
        sql.withTransaction,
        Effect.orDie
      )

    /**
     * Grouped settlement: many debits in ONE statement, one wallet ledger row each (in order,
     * before/after chained exactly as if applied one by one).
     */
    const debitMany = (platformId: string, debits: ReadonlyArray<{ readonly amount: BigDecimal.BigDecimal; readonly metadata: Record<string, unknown> }>) =>
      Effect.suspend(() => {
        if (debits.length === 0) return Effect.void
        const total = debits.reduce((sum, d) => BigDecimal.sum(sum, d.amount), BigDecimal.make(0n, 0))
        const rows = JSON.stringify(debits.map((d, i) => ({ i, amount: BigDecimal.format(d.amount), metadata: d.metadata })))
        return sql`WITH w AS (
            INSERT INTO platform_wallets (platform_id, balance_usd) VALUES (${platformId}, ${sqlDec(BigDecimal.negate(total))})
            ON CONFLICT (platform_id) DO UPDATE
              SET balance_usd = platform_wallets.balance_usd - ${sqlDec(total)}::numeric, updated_at = now()
            RETURNING balance_usd),
          d AS (
            SELECT x.i, x.amount, x.metadata,
              sum(x.amount) OVER (ORDER BY x.i ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS through
            FROM jsonb_to_recordset(${rows}::jsonb) AS x(i int, amount numeric, metadata jsonb))
          INSERT INTO platform_wallet_transactions (platform_id, type, amount_usd, balance_before, balance_after, reason, metadata)
          SELECT ${platformId}, 'debit', d.amount, w.balance_usd + ${sqlDec(total)}::numeric - d.through + d.amount,
            w.balance_usd + ${sqlDec(total)}::numeric - d.through, NULL, d.metadata
          FROM d CROSS JOIN w ORDER BY d.i`.pipe(Effect.asVoid)
      })

    /** One settlement's debit (capability runs): runs in the caller's transaction; may go below zero. */
    const debit = (platformId: string, amount: BigDecimal.BigDecimal, metadata: Record<string, unknown>) =>
      debitMany(platformId, [{ amount, metadata }])

    /**
     * A debit only if the balance covers it, with its wallet ledger row, in ONE statement (in
     * the caller's transaction): the UPDATE locks the row and re-reads the balance after any
     * concurrent change commits, so concurrent debits never take it below zero. False: refused
     * (not enough, or no wallet), nothing written.
     */
    const debitIfCovered = (platformId: string, amount: BigDecimal.BigDecimal, metadata: Record<string, unknown>) =>
      sql<{ readonly balance_usd: string }>`WITH w AS (
          UPDATE platform_wallets SET balance_usd = balance_usd - ${sqlDec(amount)}::numeric, updated_at = now()
          WHERE platform_id = ${platformId} AND balance_usd >= ${sqlDec(amount)}::numeric
          RETURNING balance_usd),
        t AS (
          INSERT INTO platform_wallet_transactions (platform_id, type, amount_usd, balance_before, balance_after, reason, metadata)
          SELECT ${platformId}, 'debit', ${sqlDec(amount)}, w.balance_usd + ${sqlDec(amount)}::numeric, w.balance_usd, NULL, ${sql.json(metadata)}
          FROM w)
        SELECT balance_usd::text FROM w`.pipe(Effect.map((rows) => rows.length > 0))

    /**
     * The wallet's ledger rows in backfill order (BackfillPage). A model call's or paid tool
     * call's debit carries the id of the log row it paid for (`log_id` in its metadata); capability
     * debits and topups have none.
     */
    const transactions = (platformId: string, params: BackfillParams) =>
      backfillPage<WalletTransactionRow>(sql, {
        source: sql`platform_wallet_transactions t`,
        scope: sql`t.platform_id = ${platformId}`,
        columns: sql`t.id, t.type, t.amount_usd::text, t.balance_before::text, t.balance_after::text, t.reason,
          t.metadata->>'log_id' AS log_id, t.metadata, t.created_at`
      }, params).pipe(Effect.map((page) => ({
        data: page.rows.map(({ cursor, row }): PlatformWalletTransaction => ({
          id: row.id,
          type: row.type,
          amount_usd: dec(row.amount_usd),
          balance_before_usd: dec(row.balance_before),
          balance_after_usd: dec(row.balance_after),
          reason: row.reason,
          log_id: row.log_id,
          request_id: typeof row.metadata.request_id === "string" ? row.metadata.request_id : null,
          metadata: row.metadata,
          created_at: row.created_at,
          cursor
        })),
        limit: params.limit,
        next_cursor: page.next
      })))

    return { get, topup, debit, debitIfCovered, debitMany, transactions } as const
  })
}) {}
