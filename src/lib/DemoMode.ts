// Whether this process runs in demo mode (GATEWAY_DEMO, on by default when DATABASE_URL is unset).
// Kept apart from src/Demo.ts so services can read it without importing the seeding code.
import { Config, Option } from "effect"

export const demoEnabled: Config.Config<boolean> = Config.zipWith(
  Config.option(Config.string("DATABASE_URL")),
  Config.option(Config.boolean("GATEWAY_DEMO")),
  (databaseUrl, demo) => Option.getOrElse(demo, () => Option.isNone(databaseUrl))
)
