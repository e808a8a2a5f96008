// Where call records live (CallRecords): in Postgres (`call_records`, migration 0019) or in Redis
// (a hash per instance). A record in Redis costs a fraction of a Postgres row (no index, WAL or
// commit, and none of the CPU Postgres shares with the gateway on a small host), so with REDIS_URL
// set Redis is the default (GATEWAY_CALL_RECORD_STORE). Either way an instance's liveness is its
// Postgres advisory lock, and a record is a settlement as JSON (settlementJson).
import type { PgClient } from "@effect/sql-pg"
import { Config, Effect, Redacted } from "effect"
import type { Redis } from "ioredis"
import { redisScript, runRedisScript } from "../lib/RedisScripts.js"
import { type Settlement, settlementJson } from "./Settlement.js"

export interface RecordStore {
  /** Writes (or replaces, by id) records of this instance and deletes others, in one round trip. */
  readonly write: (inserts: ReadonlyArray<Settlement>, deletes: ReadonlyArray<string>) => Effect.Effect<void, unknown>
  /** The other instances that may have records. */
  readonly others: Effect.Effect<ReadonlyArray<string>, unknown>
  /** An instance's records, as settlementJson text. */
  readonly recordsOf: (instance: string) => Effect.Effect<ReadonlyArray<string>, unknown>
  /** Deletes every record of an instance (it is dead and its records are settled). */
  readonly dropAll: (instance: string) => Effect.Effect<void, unknown>
  /** A clean stop: with none of its records left, the instance is no longer one to sweep. */
  readonly leave: Effect.Effect<void, unknown>
  /**
   * Postgres: the statement that applies settlements deletes their records in its transaction.
   * Redis: CallRecords deletes them once the writer reports their commit.
   */
  readonly deletedBySettlement: boolean
}

export const postgresRecordStore = (sql: PgClient.PgClient, instanceId: string, synchronousCommit: boolean): RecordStore => ({
  write: (inserts, deletes) => {
    const rows = `[${inserts.map(settlementJson).join(",")}]`
    const gone = JSON.stringify(deletes)
    return sql`WITH config AS (SELECT set_config('synchronous_commit', ${synchronousCommit ? "on" : "off"}, true)),
        inserted AS (
          INSERT INTO call_records (id, instance_id, settlement)
          SELECT (r->>'id')::uuid, ${instanceId}, r FROM jsonb_array_elements(${rows}::jsonb) AS r
          ON CONFLICT (id) DO UPDATE SET settlement = EXCLUDED.settlement
        ),
        deleted AS (DELETE FROM call_records WHERE id IN (SELECT jsonb_array_elements_text(${gone}::jsonb)::uuid))
        SELECT count(*) FROM config`
  },
  others: Effect.map(
    sql<{ readonly instance_id: string }>`
      SELECT DISTINCT instance_id::text AS instance_id FROM call_records WHERE instance_id <> ${instanceId}`,
    (rows) => rows.map((row) => row.instance_id)
  ),
  recordsOf: (instance) =>
    Effect.map(
      sql<{ readonly settlement: string }>`SELECT settlement::text AS settlement FROM call_records WHERE instance_id = ${instance}`,
      (rows) => rows.map((row) => row.settlement)
    ),
  dropAll: (instance) => Effect.asVoid(sql`DELETE FROM call_records WHERE instance_id = ${instance}`),
  leave: Effect.void, // its rows name it; none left, nothing names it
  deletedBySettlement: true
})

/**
 * Writes and deletes an instance's records: KEYS = the set of instances, the instance's hash;
 * ARGV = the instance, the number of records n, n pairs of id and record, then the ids to delete.
 * The instance is named with every record: a sweeper that took it for dead (a lost lock
 * connection) removed it from the set with its records. In slices: `unpack` is bounded by Lua's
 * stack (an even slice keeps the pairs whole).
 */
const WRITE_RECORDS = redisScript(`
local function sliced(command, from, to)
  for i = from, to, 1000 do redis.call(command, KEYS[2], unpack(ARGV, i, math.min(i + 999, to))) end
end
local n = tonumber(ARGV[2])
if n > 0 then
  redis.call('SADD', KEYS[1], ARGV[1])
  sliced('HSET', 3, 2 + 2 * n)
end
sliced('HDEL', 3 + 2 * n, #ARGV)
return 1
`)

/**
 * Redis: the set `<prefix>instances` names the instances that may hold records, the hash
 * `<prefix>{instance}` holds an instance's records by id. The prefix carries the database's
 * identity (migration 0011): gateways on other databases sharing the Redis never see each
 * other's records.
 */
export const redisRecordStore = (redis: Redis, databaseId: string, instanceId: string): RecordStore => {
  const prefix = `gw:call-records:${databaseId}:`
  const instances = `${prefix}instances`
  const hashOf = (instance: string) => `${prefix}${instance}`
  const own = hashOf(instanceId)
  const run = (pipeline: ReturnType<Redis["pipeline"]>) =>
    Effect.flatMap(Effect.tryPromise(() => pipeline.exec()), (results) => {
      const failed = results?.find(([error]) => error !== null)
      return failed === undefined ? Effect.void : Effect.fail(failed[0])
    })
  return {
    // One script, not a pipeline, on this path taken by every call: ioredis gives each pipeline
    // a hidden class of its own (a per-instance `length` getter), which kept the pipeline and its
    // records alive through every scavenge until a full collection (docs/performance.md, hot-path
    // rule "no hidden class per call").
    write: (inserts, deletes) =>
      Effect.tryPromise(() =>
        runRedisScript(redis, WRITE_RECORDS, [instances, own], [
          instanceId,
          inserts.length,
          ...inserts.flatMap((s) => [s.id, settlementJson(s)]),
          ...deletes
        ])
      ).pipe(Effect.asVoid),
    others: Effect.map(Effect.tryPromise(() => redis.smembers(instances)), (all) => all.filter((i) => i !== instanceId)),
    recordsOf: (instance) => Effect.tryPromise(() => redis.hvals(hashOf(instance))),
    dropAll: (instance) => run(redis.pipeline().del(hashOf(instance)).srem(instances, instance)),
    // Records still held (settlements not committed by the deadline) keep it in the set, for a sweeper.
    leave: Effect.flatMap(Effect.tryPromise(() => redis.hlen(own)), (held) => held === 0 ? Effect.asVoid(Effect.tryPromise(() => redis.srem(instances, instanceId))) : Effect.void),
    deletedBySettlement: false
  }
}

/** The Redis client of the call records (REDIS_URL), closed with the scope. */
export const redisConnection = Effect.gen(function*() {
  const url = Redacted.value(yield* Config.redacted("REDIS_URL"))
  return yield* Effect.acquireRelease(
    Effect.tryPromise(async () => {
      // Loaded only when used (the client is tens of MB of resident memory).
      const { Redis } = await import("ioredis")
      // Bounded: a record write that cannot get through fails, and answers stop waiting (CallRecords).
      const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 2, commandTimeout: 5_000 })
      client.on("error", () => {}) // failures reach the commands that fail
      await client.connect()
      return client
    }),
    (client) => Effect.promise(() => client.quit().catch(() => client.disconnect()))
  )
})

/** The database's identity (migration 0011): names the records of the gateways on this database. */
export const databaseIdentity = (sql: PgClient.PgClient) =>
  Effect.map(sql<{ readonly id: string }>`SELECT id::text AS id FROM database_identity`, (rows) => rows[0]?.id ?? "unknown")
