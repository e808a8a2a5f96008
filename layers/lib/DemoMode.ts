// Whether this process runs in demo mode (GATEWAY_DEMO, on by default when DATABASE_URL is unset).
// Kept apart from src/Demo.ts so services can read it without importing the seeding code.
import { Config } from "effect"
import { embeddedDatabase, withDefaultFrom } from "./ConfigValues.js"

export const demoEnabled: Config.Config<boolean> = withDefaultFrom(Config.boolean("GATEWAY_DEMO"), embeddedDatabase)
