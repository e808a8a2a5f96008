// The spec's paginated list: `{ data, total, page, limit }` from a count query and a page query.
import type { SqlError } from "@effect/sql"
import { Effect } from "effect"

export interface Page<A> {
  readonly data: ReadonlyArray<A>
  readonly total: number
  readonly page: number
  readonly limit: number
}

export const offsetOf = (page: number, limit: number) => (page - 1) * limit

export const paginate = <A, E, R>(
  params: { readonly page: number; readonly limit: number },
  count: Effect.Effect<ReadonlyArray<{ readonly total: number }>, SqlError.SqlError, R>,
  rows: Effect.Effect<ReadonlyArray<A>, E, R>
): Effect.Effect<Page<A>, E | SqlError.SqlError, R> =>
  Effect.all([count, rows], { concurrency: 2 }).pipe(
    Effect.map(([c, data]) => ({ data, total: c[0]?.total ?? 0, page: params.page, limit: params.limit }))
  )
