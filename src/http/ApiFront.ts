// The API listener's first step, for every request before any route: the request's id
// (x-request-id: the client's when well-formed, else minted; on every answer, errors and unknown
// routes included, and in the request headers the routes and the server span read), CORS
// (src/http/Cors.ts), then the chat front route, then the Messages API route, then HttpApi.
import { Effect } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import { requestIdOf } from "../../layers/lib/RequestIds.js"
import { chatFrontRoute } from "../inference/ChatRoute.js"
import { makeMessagesRoute } from "../inference/MessagesRoute.js"
import { corsOrigins, corsStep } from "./Cors.js"
import type { FrontRoute } from "./DrainingServer.js"

export const apiFront = Effect.gen(function*() {
  const chat = yield* chatFrontRoute
  const messages = yield* makeMessagesRoute
  const origins = yield* corsOrigins
  const cors = origins === null ? undefined : corsStep(origins)
  return (req: IncomingMessage, res: ServerResponse): boolean => {
    const sent = req.headers["x-request-id"]
    const id = requestIdOf(sent)
    if (id !== sent) req.headers["x-request-id"] = id
    if (cors !== undefined && cors(req, res, id)) return true
    // The chat route writes the id with its own head (a header set here would make node merge two sets).
    if (chat !== undefined && chat(req, res)) return true
    // Anthropic-shaped answers (errors too), so outside HttpApi; it writes the id with its own head.
    if (messages(req, res)) return true
    res.setHeader("x-request-id", id)
    return false
  }
}) satisfies Effect.Effect<FrontRoute, unknown, unknown>
