// The Redis call-record store (layers/ledger/CallRecordStores.ts) against a real Redis
// (REDIS_URL): one script writes and deletes an instance's records, in slices past Lua's unpack
// bound, and names the instance in the set of instances a sweeper reads. Each test uses its own
// database identity (the keys' prefix); every key is removed afterwards.
import { describe, expect, it } from "@effect/vitest"
import { BigDecimal, Effect, Option } from "effect"
import { Redis } from "ioredis"
import { randomUUID } from "node:crypto"
import { afterAll } from "vitest"
import { redisRecordStore } from "../layers/ledger/CallRecordStores.js"
import { type Settlement, settlementFromJson } from "../layers/ledger/Settlement.js"

const url = process.env.REDIS_URL ?? ""

const settlementOf = (id: string, cost: string): Settlement => ({
  id,
  platformId: "platform",
  endUserId: "end-user",
  costUsd: BigDecimal.unsafeFromString(cost),
  at: new Date("2026-11-27T12:00:00Z"),
  log: {} as Settlement["log"],
  details: {} as Settlement["details"],
  actor: {} as Settlement["actor"],
  displaySettings: null,
  parent: Option.none()
})

describe.skipIf(url === "")("Redis call-record store (needs REDIS_URL)", () => {
  const redis = url === "" ? undefined : new Redis(url)
  const databases: Array<string> = []
  const storeOf = (instance: string) => {
    const database = `test-${randomUUID()}`
    databases.push(database)
    return redisRecordStore(redis!, database, instance)
  }
  const idsOf = (records: ReadonlyArray<string>) => records.map((r) => settlementFromJson(r)?.id).sort()

  afterAll(async () => {
    for (const database of databases) {
      const keys = await redis!.keys(`gw:call-records:${database}:*`)
      if (keys.length > 0) await redis!.del(...keys)
    }
    await redis!.quit()
  })

  it.effect("writes 1,500 records in one call, then deletes 1,499 of them while adding one", () =>
    Effect.gen(function*() {
      const store = storeOf("instance-a")
      const ids = Array.from({ length: 1500 }, () => randomUUID())
      // 3,002 arguments: past the script's 1,000-argument slices, and pairs kept whole across them.
      yield* store.write(ids.map((id, i) => settlementOf(id, `0.${i + 1}`)), [])
      const written = yield* store.recordsOf("instance-a")
      expect(idsOf(written)).toEqual([...ids].sort())
      const first = written.map((r) => settlementFromJson(r)!).find((s) => s.id === ids[0])!
      expect(BigDecimal.format(first.costUsd)).toBe("0.1")

      const added = randomUUID()
      yield* store.write([settlementOf(added, "2")], ids.slice(1))
      expect(idsOf(yield* store.recordsOf("instance-a"))).toEqual([ids[0]!, added].sort())
    }))

  it.effect("names the instance with its records, so another instance's sweep finds them; deletes alone leave it named", () =>
    Effect.gen(function*() {
      const database = `test-${randomUUID()}`
      databases.push(database)
      const a = redisRecordStore(redis!, database, "instance-a")
      const b = redisRecordStore(redis!, database, "instance-b")
      expect(yield* b.others).toEqual([])
      const id = randomUUID()
      yield* a.write([settlementOf(id, "1")], [])
      expect(yield* b.others).toEqual(["instance-a"])
      yield* a.write([], [id])
      expect(yield* a.recordsOf("instance-a")).toEqual([])
      expect(yield* b.others).toEqual(["instance-a"])
      yield* b.dropAll("instance-a")
      expect(yield* b.others).toEqual([])
    }))

  it.effect("a record written again replaces the earlier one (a call's final settlement replaces its cut)", () =>
    Effect.gen(function*() {
      const store = storeOf("instance-a")
      const id = randomUUID()
      yield* store.write([settlementOf(id, "0.5")], [])
      yield* store.write([settlementOf(id, "1.25")], [])
      const records = (yield* store.recordsOf("instance-a")).map((r) => settlementFromJson(r)!)
      expect(records.map((s) => [s.id, BigDecimal.format(s.costUsd)])).toEqual([[id, "1.25"]])
    }))
})
