// One page of a ledger (budget, platform wallet, display) in backfill order: rows in (xid, seq)
// order, the writing transaction first, and only up to the oldest transaction that may still
// add rows. A row therefore never becomes visible behind a position a poller has passed: a
// poller that resumes from the last row it saw (`after`) gets every row exactly once, whatever
// the writers on other instances do (docs/decisions.md, "ledger and settlement").
import type { SqlError, Statement } from "@effect/sql"
import type { PgClient } from "@effect/sql-pg"
import { Clock, Effect } from "effect"
import { encodeCursor, type LedgerPosition } from "../lib/LedgerCursor.js"

export interface BackfillParams {
  /** Rows created strictly after this time. */
  readonly since?: Date | undefined
  /** Rows strictly after this position. */
  readonly after?: LedgerPosition | undefined
  readonly limit: number
}

export interface BackfillPage<Row> {
  readonly rows: ReadonlyArray<{ readonly row: Row; readonly cursor: string }>
  /** Where the next page starts: the last row's cursor, else the `after` given, else null. */
  readonly next: string | null
}

/**
 * The oldest transaction id that may still write a row of this database. Transactions of other
 * databases on the same server are left out: a backend writes only its own database, and a
 * long transaction elsewhere (another tenant database, a report) must not stall this one's
 * listings. An in-flight xid whose backend is not seen (a prepared transaction, a role the
 * gateway may not inspect) counts, so the horizon errs on the side of holding rows back.
 */
const horizon = (sql: PgClient.PgClient) =>
  sql`coalesce(
    (SELECT min(x) FROM pg_snapshot_xip(pg_current_snapshot()) AS x
      WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a
        WHERE a.backend_xid = x::xid AND a.datname IS NOT NULL AND a.datname <> current_database())),
    pg_snapshot_xmax(pg_current_snapshot()))`

/**
 * Committed rows past the horizon are held back; a listing waits a little for the older
 * transactions to finish (they are short), so a caller still reads its own finished writes.
 */
const HOLD_BACK_WAIT_MS = 1000
const HOLD_BACK_STEP = "20 millis"

interface Positioned {
  readonly position_xid: string
  readonly position_seq: string
  readonly settled: boolean
}

/**
 * `source` reads the ledger table as `t` (with any joins); `scope` restricts it to the caller's
 * rows; `columns` is the select list.
 */
export const backfillPage = <Row extends object>(
  sql: PgClient.PgClient,
  query: { readonly source: Statement.Fragment; readonly scope: Statement.Fragment; readonly columns: Statement.Fragment },
  params: BackfillParams
): Effect.Effect<BackfillPage<Row>> => {
  const filters = [
    query.scope,
    // At the precision answers show (milliseconds): `since` set to a row's created_at excludes that row.
    ...(params.since === undefined ? [] : [sql`date_trunc('milliseconds', t.created_at) > ${params.since}`]),
    ...(params.after === undefined
      ? []
      : [sql`(t.xid, t.seq) > (${params.after.xid}::xid8, ${params.after.seq}::bigint)`])
  ]
  const read = sql<Row & Positioned>`SELECT ${query.columns}, t.xid::text AS position_xid, t.seq::text AS position_seq,
      t.xid < (SELECT ${horizon(sql)}) AS settled
    FROM ${query.source}
    WHERE ${sql.and(filters)}
    ORDER BY t.xid, t.seq
    LIMIT ${params.limit}`
  // The settled rows are a prefix (the order is by xid, the horizon an xid).
  const settledPrefix = (rows: ReadonlyArray<Row & Positioned>) => {
    const end = rows.findIndex((r) => !r.settled)
    return end === -1 ? rows : rows.slice(0, end)
  }
  const attempt = (deadline: number): Effect.Effect<ReadonlyArray<Row & Positioned>, SqlError.SqlError> =>
    Effect.flatMap(Effect.zip(read, Clock.currentTimeMillis), ([rows, now]) => {
      const settled = settledPrefix(rows)
      return settled.length === rows.length || now >= deadline
        ? Effect.succeed(settled)
        : Effect.zipRight(Effect.sleep(HOLD_BACK_STEP), attempt(deadline))
    })
  return Clock.currentTimeMillis.pipe(
    Effect.flatMap((start) => attempt(start + HOLD_BACK_WAIT_MS)),
    Effect.map((rows) => {
      const page = rows.map(({ position_xid, position_seq, settled: _settled, ...row }) => ({
        row: row as unknown as Row,
        cursor: encodeCursor({ xid: position_xid, seq: position_seq })
      }))
      const last = page[page.length - 1]
      return { rows: page, next: last?.cursor ?? (params.after === undefined ? null : encodeCursor(params.after)) }
    }),
    Effect.orDie
  )
}
