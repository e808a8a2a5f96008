// The request body, read once straight from the Node request: the platform's reader (a cached
// Effect with a scoped stream per request) cost on every call (hot-path rule "plain code at the
// I/O edges", docs/performance.md). HttpApi's payload decode
// then parses the text read here; the chat route (src/inference/ChatRoute.ts) parses it itself.
import { HttpServerError, type HttpServerRequest } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Effect } from "effect"
import type { IncomingMessage } from "node:http"

/**
 * A Node request's body as text; fails with `tooLarge()` past `maxBytes` (the rest is drained,
 * so the answer can still be written) and with `broken(cause)` when the body breaks off.
 */
export const readNodeBody = <E1, E2>(
  source: IncomingMessage,
  maxBytes: number,
  tooLarge: () => E1,
  broken: (cause: Error) => Effect.Effect<never, E2>
): Effect.Effect<string, E1 | E2> =>
  Effect.async<string, E1 | E2>((resume) => {
    const chunks: Array<Buffer> = []
    let bytes = 0
    const onData = (chunk: Buffer) => {
      bytes += chunk.length
      if (bytes > maxBytes) {
        source.off("data", onData)
        source.resume()
        resume(Effect.fail(tooLarge()))
      } else {
        chunks.push(chunk)
      }
    }
    source.on("data", onData)
    source.once("end", () => {
      if (bytes <= maxBytes) resume(Effect.succeed(chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks).toString("utf8")))
    })
    source.once("error", (cause) => resume(broken(cause)))
  })

/** The body as text; fails with `tooLarge()` past `maxBytes` (the rest is not read). */
export const readBodyText = <E>(
  request: HttpServerRequest.HttpServerRequest,
  maxBytes: number,
  tooLarge: () => E
): Effect.Effect<string, E> =>
  // As the platform's reader: a body that breaks off is a Decode error (400; the client that
  // broke it off rarely reads the answer), not an unhandled defect logged as an error.
  readNodeBody(NodeHttpServerRequest.toIncomingMessage(request), maxBytes, tooLarge, (cause) =>
    Effect.die(new HttpServerError.RequestError({ request, reason: "Decode", cause })))

/**
 * The request with its body already read: its `text` (and so `json`) answers from it. The Node
 * request memoises its text in `textEffect`; filling it hands the text on without a wrapper
 * object. A platform version without that field fails every body-carrying request loudly (and
 * every test with it) rather than letting a handler wait for a body already consumed.
 */
export const withBodyText = (request: HttpServerRequest.HttpServerRequest, text: string): Effect.Effect<void> => {
  if (!("textEffect" in request)) {
    return Effect.dieMessage("@effect/platform-node's request has no textEffect: cannot hand the read body on")
  }
  ;(request as { textEffect: unknown }).textEffect = Effect.succeed(text)
  return Effect.void
}
