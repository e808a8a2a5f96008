// Classifying Postgres errors by SQLSTATE.
import type { SqlError } from "@effect/sql/SqlError"

const sqlState = (e: SqlError): string | undefined => {
  const code = (e.cause as { readonly code?: unknown } | undefined)?.code
  return typeof code === "string" ? code : undefined
}

/**
 * 57014 query_canceled. @effect/sql-pg cancels the running query of an interrupted fiber with
 * an asynchronous cancel request; when it arrives late it can hit the next statement on that
 * pooled connection, even one of an uninterruptible settlement. Such a transaction rolled back
 * whole, so running it again is safe.
 */
export const isQueryCanceled = (e: { readonly _tag: string }): boolean =>
  e._tag === "SqlError" && sqlState(e as SqlError) === "57014"

/** 40P01 deadlock_detected: the transaction rolled back whole; running it again is safe. */
export const isDeadlock = (e: { readonly _tag: string }): boolean =>
  e._tag === "SqlError" && sqlState(e as SqlError) === "40P01"

export const isUniqueViolation = (e: SqlError): boolean => sqlState(e) === "23505"

/** Postgres unreachable or restarting: connection errors and admin shutdown SQLSTATEs. */
export const isDatabaseOutage = (e: SqlError): boolean => {
  const cause = e.cause as { readonly code?: unknown; readonly message?: unknown } | undefined
  const code = typeof cause?.code === "string" ? cause.code : ""
  const message = typeof cause?.message === "string" ? cause.message : ""
  return code.startsWith("08") || code === "57P01" || code === "57P02" || code === "57P03" ||
    code === "ECONNREFUSED" || code === "ECONNRESET" || code === "ETIMEDOUT" ||
    /Connection terminated|connect ECONNREFUSED|timeout exceeded when trying to connect|connection error|not queryable|Connection ended/i.test(message) ||
    /Failed to acquire connection/i.test(e.message)
}
