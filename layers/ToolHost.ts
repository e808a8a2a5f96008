// ToolHost: tool apps over MCP with OAuth, connections and metering. SKELETON: being implemented.
import { Effect } from "effect"

export class ToolHost extends Effect.Service<ToolHost>()("gateway/ToolHost", {
  effect: Effect.succeed({})
}) {}
