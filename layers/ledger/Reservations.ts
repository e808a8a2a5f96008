// Budget reservations (platform setting budget_enforcement "reserve"): an admitted model call
// holds its maximum cost on its budget and the platform wallet until its settlement deletes the
// reservation in the transaction that debits the actual cost. A reservation past its expiry
// holds nothing: a crashed instance's calls stop holding money once their time is up.
import { PgClient } from "@effect/sql-pg"
import { type BigDecimal, Effect, Layer } from "effect"
import { timeOrderedUuid } from "../lib/Ids.js"
import { dec, sqlDec } from "../lib/Money.js"
import { stubService } from "../lib/Stubs.js"

/** What a reservation attempt comes to: the id of the reservation, or the check that refused it. */
export type ReserveResult =
  | { readonly _tag: "Reserved"; readonly id: string }
  | { readonly _tag: "Refused"; readonly code: "budget_exhausted" | "wallet_insufficient" }

export class Reservations extends Effect.Service<Reservations>()("gateway/Reservations", {
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient

    /**
     * Reserves `amount` on the budget (null: a platform-key call, the wallet only) and the
     * wallet, in one statement that locks both rows and checks what remains once open holds and
     * reservations are counted (the database function reserve_budget).
     */
    const reserve = (platformId: string, budgetId: string | null, amount: BigDecimal.BigDecimal, expiresAt: Date) =>
      Effect.gen(function*() {
        const id = timeOrderedUuid()
        const [row] = yield* sql<{ readonly result: string }>`SELECT reserve_budget(${id}::uuid, ${platformId}::uuid, ${budgetId}::uuid,
          ${sqlDec(amount)}::numeric, ${expiresAt}) AS result`
        const result: ReserveResult = row?.result === "reserved"
          ? { _tag: "Reserved", id }
          : { _tag: "Refused", code: row?.result === "budget_exhausted" ? "budget_exhausted" : "wallet_insufficient" }
        return result
      }).pipe(Effect.orDie, Effect.withSpan("Reservations.reserve"))

    /** Releases a reservation whose call ends without a settlement (no upstream answered). */
    const release = (id: string) =>
      sql`DELETE FROM budget_reservations WHERE id = ${id}`.pipe(
        Effect.asVoid,
        Effect.catchAllCause((cause) => Effect.logWarning("releasing a budget reservation failed; it lapses at its expiry", cause))
      )

    /** The USD reserved on a budget by unexpired reservations. */
    const reservedOnBudget = (budgetId: string) =>
      sql<{ readonly reserved: string }>`SELECT coalesce(sum(amount_usd), 0)::text AS reserved FROM budget_reservations
        WHERE budget_id = ${budgetId} AND expires_at > now()`.pipe(
        Effect.map(([row]) => dec(row?.reserved ?? "0")),
        Effect.orDie
      )

    return { reserve, release, reservedOnBudget } as const
  })
}) {
  /** Only the members a test gives; any other throws when called (optimistic mode calls none). */
  static readonly test = (members: Partial<Reservations> = {}): Layer.Layer<Reservations> =>
    Layer.succeed(Reservations, stubService<Reservations>("Reservations", members))
}
