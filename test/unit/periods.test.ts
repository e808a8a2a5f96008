// nextPeriodStart against currentPeriodStart, the ledger's own rule: a period reset is due at a
// time exactly when that time is at or past the next period start. The one-statement settlement
// relies on it to write a call without a reset (layers/ledger/Settlements.ts).
import fc from "fast-check"
import { expect, it } from "vitest"
import { currentPeriodStart, nextPeriodStart } from "../../layers/lib/Periods.js"

const YEAR_MS = 365 * 24 * 60 * 60 * 1000
const instant = fc.integer({ min: Date.UTC(2020, 0, 1), max: Date.UTC(2030, 0, 1) })

it("a reset is due exactly from the next period start on", () => {
  fc.assert(
    fc.property(
      fc.constantFrom("one_time" as const, "daily" as const, "monthly" as const),
      instant,
      fc.integer({ min: 0, max: 3 * YEAR_MS }),
      fc.integer({ min: 0, max: 3 * YEAR_MS }),
      (period, anchorMs, sinceAnchor, later) => {
        const anchor = new Date(anchorMs)
        // The period start a budget can hold: the boundary current at some time after its anchor.
        const periodStart = currentPeriodStart(period, anchor, new Date(anchorMs + sinceAnchor))
        const now = new Date(periodStart.getTime() + later)
        const next = nextPeriodStart(period, anchor, periodStart)
        const due = currentPeriodStart(period, anchor, now).getTime() > periodStart.getTime()
        expect(due).toBe(next !== null && now.getTime() >= next.getTime())
        if (next !== null) expect(next.getTime()).toBeGreaterThan(periodStart.getTime())
      }
    ),
    { numRuns: 2000 }
  )
})

it("month ends clamp as the ledger's months do: Jan 31 -> Feb 29 -> Mar 31", () => {
  const anchor = new Date(Date.UTC(2024, 0, 31, 10))
  expect(nextPeriodStart("monthly", anchor, anchor)).toEqual(new Date(Date.UTC(2024, 1, 29, 10)))
  expect(nextPeriodStart("monthly", anchor, new Date(Date.UTC(2024, 1, 29, 10)))).toEqual(new Date(Date.UTC(2024, 2, 31, 10)))
  expect(nextPeriodStart("daily", anchor, anchor)).toEqual(new Date(Date.UTC(2024, 1, 1, 10)))
  expect(nextPeriodStart("one_time", anchor, anchor)).toBeNull()
})
