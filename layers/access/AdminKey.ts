// The operator key: GATEWAY_ADMIN_KEY, or one generated on first start and kept in the data dir.
// A generated key is printed by the first start that comes up: `admin-key.unprinted` marks it
// until then (a first start that fails later, e.g. on a busy port, must not swallow it).
import { Config, Context, Effect, Layer, Option, Redacted } from "effect"
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { dataDir } from "../platform/EmbeddedPostgres.js"
import { mintKey } from "./KeyFormat.js"

export interface AdminKeyValue {
  readonly key: Redacted.Redacted<string>
  /** A generated key no start has printed yet: the startup report prints it, then `printed`. */
  readonly unprinted: boolean
  /** Records that the key was printed. */
  readonly printed: Effect.Effect<void>
}

export class AdminKey extends Context.Tag("gateway/AdminKey")<AdminKey, AdminKeyValue>() {
  static readonly layer = Layer.effect(
    AdminKey,
    Effect.gen(function*() {
      const configured = yield* Config.option(Config.redacted("GATEWAY_ADMIN_KEY"))
      if (Option.isSome(configured)) return { key: configured.value, unprinted: false, printed: Effect.void }
      const dir = yield* dataDir
      const file = join(dir, "admin-key")
      const marker = join(dir, "admin-key.unprinted")
      const printed = Effect.sync(() => rmSync(marker, { force: true }))
      if (existsSync(file)) {
        return { key: Redacted.make(readFileSync(file, "utf8").trim()), unprinted: existsSync(marker), printed }
      }
      mkdirSync(dir, { recursive: true })
      // The marker first: a start killed between the two writes still prints the key next time.
      writeFileSync(marker, "", { mode: 0o600 })
      const raw = mintKey("admin").raw
      writeFileSync(file, raw + "\n", { mode: 0o600 })
      return { key: Redacted.make(raw), unprinted: true, printed }
    }).pipe(Effect.orDie)
  )
}
