// Whether this process runs in demo mode (GATEWAY_DEMO, on by default when DATABASE_URL is unset).
// Kept apart from src/Demo.ts so services can read it without importing the seeding code.
import { Config, Effect, Option } from "effect"

export const demoEnabled = Effect.gen(function*() {
  const databaseUrl = yield* Config.option(Config.string("DATABASE_URL"))
  return yield* Config.boolean("GATEWAY_DEMO").pipe(Config.withDefault(Option.isNone(databaseUrl)))
})
