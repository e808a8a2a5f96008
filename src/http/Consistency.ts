// Read-your-writes around the settlement queue and the admission cache, for both listeners:
// a request first waits for its tenant's queued settlements (so what it reads includes the
// caller's finished calls), and a request that may write drops the platform's cached admission
// state once it has answered (so the next call's checks see the write).
import { HttpApp } from "@effect/platform"
import { Effect } from "effect"
import { AdmissionCache } from "../../layers/pipeline/AdmissionCache.js"
import { Settlements } from "../../layers/ledger/Settlements.js"

/** `platformId` undefined: the operator, whose requests concern every platform. */
export interface ConsistencyScope {
  readonly platformId: string | undefined
  readonly endUserId?: string | undefined
}

export const makeReadYourWrites = Effect.gen(function*() {
  const settlements = yield* Settlements
  const admissionCache = yield* AdmissionCache
  return (scope: ConsistencyScope, writes: boolean) =>
    Effect.zipRight(
      scope.platformId === undefined
        ? settlements.awaitEverything()
        : settlements.awaitPlatform(scope.platformId, scope.endUserId),
      writes
        ? HttpApp.appendPreResponseHandler((_request, response) =>
          Effect.as(admissionCache.invalidate(scope.platformId), response))
        : Effect.void
    )
})
