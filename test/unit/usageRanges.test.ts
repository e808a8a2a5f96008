// The usage report's range rules (layers/ledger/Usage.ts): its defaults and bounds, the split of a
// range into whole units (read from a rollup) and edges (read from the log) that covers it exactly
// once, and the time buckets listed for it.
import { Effect, Either } from "effect"
import fc from "fast-check"
import { expect, it } from "vitest"
import { bucketStarts, resolveRange, sourceOf, splitRange, type UsageQuery } from "../../layers/ledger/Usage.js"

const HOUR = 3_600_000
const DAY = 24 * HOUR
const instant = fc.integer({ min: Date.UTC(2020, 0, 1), max: Date.UTC(2030, 0, 1) })
const resolve = (query: Partial<UsageQuery>, now: Date) =>
  Effect.runSync(Effect.either(resolveRange({ group_by: "day", limit: 1000, ...query }, now)))

it("defaults to the 30 days up to now, or up to `to`", () => {
  const now = new Date(Date.UTC(2026, 10, 26, 17, 3, 12))
  expect(resolve({}, now)).toEqual(Either.right({ from: new Date(now.getTime() - 30 * DAY), to: now }))
  const to = new Date(Date.UTC(2026, 5, 1))
  expect(resolve({ to }, now)).toEqual(Either.right({ from: new Date(to.getTime() - 30 * DAY), to }))
})

it("refuses an empty or reversed range and one past its bound, naming the parameter", () => {
  const now = new Date(Date.UTC(2026, 10, 26))
  const refusal = (query: Partial<UsageQuery>) => {
    const range = resolve(query, now)
    return Either.isLeft(range) ? range.left.param : null
  }
  expect(refusal({ from: now, to: now })).toBe("from")
  expect(refusal({ from: new Date(now.getTime() + 1) })).toBe("from")
  expect(refusal({ from: new Date(now.getTime() - 366 * DAY) })).toBe(null)
  expect(refusal({ from: new Date(now.getTime() - 366 * DAY - 1) })).toBe("from")
  expect(refusal({ group_by: "hour", from: new Date(now.getTime() - 31 * DAY) })).toBe(null)
  expect(refusal({ group_by: "hour", from: new Date(now.getTime() - 31 * DAY - 1) })).toBe("from")
  expect(refusal({ group_by: "hour", to: new Date(now.getTime() + 1) })).toBe(null)
})

it("whole units and edges cover the range exactly once", () => {
  fc.assert(fc.property(instant, fc.integer({ min: 1, max: 40 * DAY }), fc.constantFrom(HOUR, DAY), (start, length, grain) => {
    const from = new Date(start)
    const to = new Date(start + length)
    const { whole, edges } = splitRange(from, to, grain)
    const pieces = [...edges, ...(whole === null ? [] : [whole])].map(([a, b]) => [a.getTime(), b.getTime()] as const)
      .sort(([a], [b]) => a - b)
    expect(pieces[0]![0]).toBe(from.getTime())
    expect(pieces[pieces.length - 1]![1]).toBe(to.getTime())
    pieces.forEach(([a, b], i) => {
      expect(a).toBeLessThan(b)
      if (i > 0) expect(a).toBe(pieces[i - 1]![1])
    })
    if (whole !== null) {
      expect(whole[0].getTime() % grain).toBe(0)
      expect(whole[1].getTime() % grain).toBe(0)
    }
    for (const [a, b] of edges) expect(b.getTime() - a.getTime()).toBeLessThan(whole === null ? 2 * grain : grain)
  }))
})

it("lists every bucket that overlaps the range, from the one holding `from`", () => {
  const from = new Date(Date.UTC(2026, 10, 1, 13, 30))
  expect(bucketStarts(from, new Date(Date.UTC(2026, 10, 3, 0, 0)), "day")).toEqual([Date.UTC(2026, 10, 1), Date.UTC(2026, 10, 2)])
  expect(bucketStarts(from, new Date(Date.UTC(2026, 10, 3, 0, 1)), "day")).toHaveLength(3)
  expect(bucketStarts(from, new Date(Date.UTC(2026, 10, 1, 15, 0)), "hour")).toEqual([Date.UTC(2026, 10, 1, 13), Date.UTC(2026, 10, 1, 14)])
})

it("reads the hourly rollup unless the report is by or of end users", () => {
  const query = (q: Partial<UsageQuery>): UsageQuery => ({ group_by: "day", limit: 1000, ...q })
  expect(sourceOf(query({ group_by: "hour", model: "m" }))).toEqual({ table: "usage_hourly", grain: HOUR })
  expect(sourceOf(query({ group_by: "end_user" }))).toEqual({ table: "usage_daily_users", grain: DAY })
  expect(sourceOf(query({ group_by: "model", end_user_id: "u" }))).toEqual({ table: "usage_daily_users", grain: DAY })
  expect(sourceOf(query({ group_by: "hour", end_user_id: "u" }))).toEqual({ table: null })
})
