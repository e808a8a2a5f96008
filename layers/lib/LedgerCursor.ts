// A ledger row's position in the backfill order, (writing transaction id, sequence number), and
// the opaque cursor that carries it: base64url of "<xid>:<seq>". Clients never parse it.

export interface LedgerPosition {
  /** The writing transaction's xid8, as decimal text. */
  readonly xid: string
  /** The row's sequence number (bigint), as decimal text. */
  readonly seq: string
}

const XID8_MAX = 18446744073709551615n
const BIGINT_MAX = 9223372036854775807n
const POSITION = /^(0|[1-9]\d{0,19}):(0|[1-9]\d{0,18})$/

export const encodeCursor = (position: LedgerPosition): string =>
  Buffer.from(`${position.xid}:${position.seq}`, "utf8").toString("base64url")

/** The position a cursor names, or undefined when it is not one this gateway issued. */
export const decodeCursor = (cursor: string): LedgerPosition | undefined => {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(cursor)) return undefined
  const match = POSITION.exec(Buffer.from(cursor, "base64url").toString("utf8"))
  if (match === null) return undefined
  const [, xid, seq] = match
  // In range of the columns, so the comparison in SQL never fails on a cast.
  if (BigInt(xid!) > XID8_MAX || BigInt(seq!) > BIGINT_MAX) return undefined
  return { xid: xid!, seq: seq! }
}
