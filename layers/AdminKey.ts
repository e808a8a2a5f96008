// The operator key: GATEWAY_ADMIN_KEY, or one generated on first start and kept in the data dir.
import { Config, Context, Effect, Layer, Option, Redacted } from "effect"
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { dataDir } from "./EmbeddedPostgres.js"
import { mintKey } from "./KeyFormat.js"

export interface AdminKeyValue {
  readonly key: Redacted.Redacted<string>
  /** True when this start generated the key: the startup report prints it this once. */
  readonly generated: boolean
}

export class AdminKey extends Context.Tag("gateway/AdminKey")<AdminKey, AdminKeyValue>() {
  static readonly layer = Layer.effect(
    AdminKey,
    Effect.gen(function*() {
      const configured = yield* Config.option(Config.redacted("GATEWAY_ADMIN_KEY"))
      if (Option.isSome(configured)) return { key: configured.value, generated: false }
      const dir = yield* dataDir
      const file = join(dir, "admin-key")
      if (existsSync(file)) return { key: Redacted.make(readFileSync(file, "utf8").trim()), generated: false }
      mkdirSync(dir, { recursive: true })
      const raw = mintKey("admin").raw
      writeFileSync(file, raw + "\n", { mode: 0o600 })
      return { key: Redacted.make(raw), generated: true }
    }).pipe(Effect.orDie)
  )
}
