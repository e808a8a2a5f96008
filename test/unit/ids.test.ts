// The ids the gateway mints: time-ordered UUIDs for rows written on every call (layers/lib/Ids.ts).
import { expect, it } from "vitest"
import { isUuid, timeOrderedUuid } from "../../layers/lib/Ids.js"

const V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

it("a time-ordered id is a version-7 UUID whose first 48 bits are the time in milliseconds", () => {
  const before = Date.now()
  const id = timeOrderedUuid()
  const after = Date.now()
  expect(id).toMatch(V7)
  expect(isUuid(id)).toBe(true)
  const ms = parseInt(id.replaceAll("-", "").slice(0, 12), 16)
  expect(ms).toBeGreaterThanOrEqual(before)
  expect(ms).toBeLessThanOrEqual(after)
})

it("ids of a later millisecond sort after earlier ones; ids of one millisecond differ", async () => {
  const first = timeOrderedUuid()
  await new Promise((resolve) => setTimeout(resolve, 2))
  const later = timeOrderedUuid()
  expect(later > first).toBe(true)
  const many = new Set(Array.from({ length: 10_000 }, timeOrderedUuid))
  expect(many.size).toBe(10_000)
})
