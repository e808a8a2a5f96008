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

export const isUniqueViolation = (e: SqlError): boolean => sqlState(e) === "23505"
