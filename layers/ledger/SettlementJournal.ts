// The settlement journal: queued settlements survive a crash of the process (SIGKILL, OOM kill).
// A settlement is appended to this instance's journal (one JSON line, written synchronously)
// when it is queued; at start, the journals of instances that are gone are read back and queued
// again. A settlement applies once whatever the replays (its log row id, see Settlements), so a
// journal may hold settlements that were written already.
// Journals are segment files under GATEWAY_DATA_DIR/settlements: a segment whose settlements are
// all written is deleted (the current one truncated). The writes are not fsynced: they survive
// the process, not the machine (docs/decisions.md). With call records on (CallRecords) a
// settlement is journaled only while the settlement writer is stuck.
import { PgClient } from "@effect/sql-pg"
import { Config, Effect, type Scope } from "effect"
import { randomBytes } from "node:crypto"
import { closeSync, ftruncateSync, mkdirSync, openSync, readdirSync, readFileSync, unlinkSync, writeSync } from "node:fs"
import { basename, join } from "node:path"
import { dataDir } from "../platform/EmbeddedPostgres.js"
import { type Settlement, settlementFromJson, settlementJson } from "./Settlement.js"

export interface JournalLimits {
  /** A segment past this size is closed and a new one started. */
  readonly segmentBytes: number
  /** The current segment is truncated when all its settlements are written and it is this large. */
  readonly truncateBytes: number
}

const LIMITS: JournalLimits = { segmentBytes: 8 * 1024 * 1024, truncateBytes: 64 * 1024 }

export interface Segment {
  readonly path: string
  readonly fd: number
  readonly headerBytes: number
  bytes: number
  /** Settlements appended here and not yet written to the database. */
  open: number
}

const toLine = (s: Settlement) => settlementJson(s) + "\n"
const fromLine = settlementFromJson

/** Files of segments open in this process (several gateways may run in one process: tests). */
const liveFiles = new Set<string>()

/** The journal's owner is gone: another pid no longer running, or an earlier life of this pid (a container restart). */
const ownerGone = (path: string) => {
  if (liveFiles.has(path)) return false
  const pid = Number(basename(path).split("-")[0])
  if (!Number.isInteger(pid) || pid === process.pid) return true
  try {
    process.kill(pid, 0)
    return false
  } catch (error) {
    return (error as { code?: string }).code === "ESRCH"
  }
}

export interface Leftovers {
  /** Settlements of gone instances, each id once, in journal order. */
  readonly settlements: ReadonlyArray<Settlement>
  /** Their files: delete once the settlements are in this instance's journal. */
  readonly files: ReadonlyArray<string>
  /** Journals of another database, left where they are. */
  readonly foreign: ReadonlyArray<string>
}

export interface Journal {
  readonly leftovers: Leftovers
  /** Appends a settlement; returns its segment, to `release` once it is written. */
  readonly append: (settlement: Settlement) => Segment
  readonly release: (segment: Segment) => void
  /** Deletes the read leftovers' files (after their settlements were appended here). */
  readonly dropLeftovers: () => void
  /** Closes the segments; those with unwritten settlements stay for the next start. */
  readonly close: () => ReadonlyArray<string>
}

/** Opens this instance's journal in `dir` for the database `database`, reading what gone instances left. */
export const openJournal = (dir: string, database: string, limits: JournalLimits = LIMITS): Journal => {
  mkdirSync(dir, { recursive: true, mode: 0o700 })
  const header = JSON.stringify({ journal: 1, database }) + "\n"

  const seen = new Set<string>()
  const settlements: Array<Settlement> = []
  const files: Array<string> = []
  const foreign: Array<string> = []
  for (const name of readdirSync(dir).filter((n) => n.endsWith(".jsonl")).sort()) {
    const path = join(dir, name)
    if (!ownerGone(path)) continue
    const [first, ...lines] = readFileSync(path, "utf8").split("\n")
    let owner: unknown
    try {
      owner = JSON.parse(first ?? "").database
    } catch {
      owner = undefined
    }
    if (owner !== database) {
      if (first !== "") foreign.push(path)
      else files.push(path) // torn before its header: nothing in it
      continue
    }
    for (const line of lines) {
      const settlement = line === "" ? null : fromLine(line)
      if (settlement === null || seen.has(settlement.id)) continue
      seen.add(settlement.id)
      settlements.push(settlement)
    }
    files.push(path)
  }

  const instance = `${process.pid}-${Date.now().toString(36)}-${randomBytes(4).toString("hex")}`
  const segments = new Set<Segment>()
  let sequence = 0
  const startSegment = (): Segment => {
    const path = join(dir, `${instance}-${String(sequence++).padStart(6, "0")}.jsonl`)
    // Owner only: the lines carry tenants' ids, costs and request metadata.
    const fd = openSync(path, "a", 0o600)
    writeSync(fd, header)
    liveFiles.add(path)
    const segment: Segment = { path, fd, headerBytes: Buffer.byteLength(header), bytes: Buffer.byteLength(header), open: 0 }
    segments.add(segment)
    return segment
  }
  let current = startSegment()

  const remove = (segment: Segment) => {
    closeSync(segment.fd)
    unlinkSync(segment.path)
    liveFiles.delete(segment.path)
    segments.delete(segment)
  }

  return {
    leftovers: { settlements, files, foreign },
    append: (settlement) => {
      if (current.bytes > limits.segmentBytes) {
        const full = current
        current = startSegment()
        if (full.open === 0) remove(full)
      }
      const line = toLine(settlement)
      writeSync(current.fd, line)
      current.bytes += Buffer.byteLength(line)
      current.open++
      return current
    },
    release: (segment) => {
      if (!segments.has(segment)) return
      segment.open--
      if (segment.open > 0) return
      if (segment !== current) remove(segment)
      else if (segment.bytes > limits.truncateBytes) {
        ftruncateSync(segment.fd, segment.headerBytes)
        segment.bytes = segment.headerBytes
      }
    },
    dropLeftovers: () => {
      for (const path of files) unlinkSync(path)
    },
    close: () => {
      const kept: Array<string> = []
      for (const segment of [...segments]) {
        if (segment.open === 0) remove(segment)
        else {
          closeSync(segment.fd)
          liveFiles.delete(segment.path)
          kept.push(segment.path)
        }
      }
      return kept
    }
  }
}

/**
 * This instance's settlement journal (GATEWAY_SETTLEMENT_JOURNAL, default on) under
 * GATEWAY_DATA_DIR/settlements, closed when the scope closes: opened before the writer starts,
 * it closes after the queue drained.
 */
export const openSettlementJournal: Effect.Effect<Journal | null, never, PgClient.PgClient | Scope.Scope> = Effect.gen(function*() {
  const enabled = yield* Config.boolean("GATEWAY_SETTLEMENT_JOURNAL").pipe(Config.withDefault(true))
  if (!enabled) return null
  const sql = yield* PgClient.PgClient
  const [identity] = yield* sql<{ readonly id: string }>`SELECT id::text AS id FROM database_identity`
  const dir = join(yield* dataDir, "settlements")
  return yield* Effect.acquireRelease(
    Effect.try({
      try: () => openJournal(dir, identity!.id),
      catch: (error) => new Error(`settlement journal: cannot open ${dir} (GATEWAY_SETTLEMENT_JOURNAL=false turns it off): ${error}`)
    }),
    (journal) =>
      Effect.suspend(() => {
        const kept = journal.close()
        return kept.length === 0 ? Effect.void : Effect.logWarning(`settlement journal: unwritten settlements kept for the next start in ${kept.join(", ")}`)
      })
  )
}).pipe(Effect.orDie)
