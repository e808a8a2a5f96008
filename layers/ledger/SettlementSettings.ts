// The settlement writer's settings: its wait at low load, when it counts as stuck, whether calls
// are on record and where (CallRecords), and whether its commits wait for the WAL flush.
import { Config, Option, Redacted } from "effect"
import { durationMsConfig } from "../lib/ConfigValues.js"

/** The writer's wait at low load (0: none; see LINGER_MS). */
export const settlementLingerMs = durationMsConfig("GATEWAY_SETTLEMENT_LINGER", 25)
/**
 * How long a write of settlements or call records may take before the writer counts as stuck (a
 * database outage or a lock): past it, answers stop waiting for their call records and queued
 * settlements are journaled.
 */
export const settlementWaitMs = durationMsConfig("GATEWAY_SETTLEMENT_WAIT", 5_000, 1)

/** REDIS_URL is set: the instances share a Redis, as a fleet does (rate limits). */
const redisConfigured = Config.option(Config.redacted("REDIS_URL")).pipe(
  Config.map((url) => Option.exists(url, (u) => Redacted.value(u).trim() !== ""))
)

/**
 * GATEWAY_CALL_RECORD_STORE: where call records live (layers/ledger/CallRecordStores.ts): `redis`
 * (the default when REDIS_URL is set) or `postgres`.
 */
export const callRecordStore = Config.literal("redis", "postgres")("GATEWAY_CALL_RECORD_STORE").pipe(
  Config.orElse(() => redisConfigured.pipe(Config.map((redis) => redis ? "redis" as const : "postgres" as const)))
)

/**
 * GATEWAY_CALL_RECORDS: calls are put on record (CallRecords), so any instance settles the calls
 * of a dead one, and the journal is written only while the records cannot be written. Default: on
 * when REDIS_URL is set (a fleet; the records then live in Redis), off without it (one instance,
 * whose queued settlements are journaled on its disk).
 */
export const callRecordsEnabled = Config.boolean("GATEWAY_CALL_RECORDS").pipe(Config.orElse(() => redisConfigured))

/** Whether settlements delete call records in their own commit (records on, in Postgres). */
export const callRecordsInPostgres = Config.all([callRecordsEnabled, callRecordStore]).pipe(
  Config.map(([enabled, store]) => enabled && store === "postgres")
)

/**
 * GATEWAY_SETTLEMENT_SYNCHRONOUS_COMMIT: on, settlement and call-record commits wait for the
 * server's own setting (the WAL flush, and synchronous replicas if configured); off, a commit
 * returns once Postgres has it: a crash of the gateway loses nothing, a crash of Postgres itself
 * can lose the last moments of commits (docs/decisions.md). Default: off with call records (an
 * answer waits for its record's commit), on without.
 */
export const settlementSynchronousCommit = Config.boolean("GATEWAY_SETTLEMENT_SYNCHRONOUS_COMMIT").pipe(
  Config.orElse(() => callRecordsEnabled.pipe(Config.map((records) => !records)))
)
