// The request body, read once straight from the Node request: the platform's reader (a cached
// Effect with a scoped stream per request) cost about 90 us a call. The handler's payload
// decode then parses the text read here.
import { HttpServerError, type HttpServerRequest } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Effect } from "effect"

/** The body as text; fails with `tooLarge()` past `maxBytes` (the rest is not read). */
export const readBodyText = <E>(
  request: HttpServerRequest.HttpServerRequest,
  maxBytes: number,
  tooLarge: () => E
): Effect.Effect<string, E> =>
  Effect.async<string, E>((resume) => {
    const source = NodeHttpServerRequest.toIncomingMessage(request)
    const chunks: Array<Buffer> = []
    let bytes = 0
    const onData = (chunk: Buffer) => {
      bytes += chunk.length
      if (bytes > maxBytes) {
        source.off("data", onData)
        source.resume() // drain the rest so the answer can still be written
        resume(Effect.fail(tooLarge()))
      } else {
        chunks.push(chunk)
      }
    }
    source.on("data", onData)
    source.once("end", () => {
      if (bytes <= maxBytes) resume(Effect.succeed(chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks).toString("utf8")))
    })
    // As the platform's reader: a body that breaks off is a Decode error (400; the client that
    // broke it off rarely reads the answer), not an unhandled defect logged as an error.
    source.once("error", (cause) =>
      resume(Effect.die(new HttpServerError.RequestError({ request, reason: "Decode", cause }))))
  })

/**
 * The request with its body already read: its `text` (and so `json`) answers from it. The Node
 * request memoises its text in `textEffect`; filling it hands the text on without a wrapper
 * object. A platform version without that field fails every body-carrying request loudly (and
 * every test with it) rather than letting a handler wait for a body already consumed.
 */
export const withBodyText = (
  request: HttpServerRequest.HttpServerRequest,
  text: string
): Effect.Effect<HttpServerRequest.HttpServerRequest> => {
  if (!("textEffect" in request)) {
    return Effect.dieMessage("@effect/platform-node's request has no textEffect: cannot hand the read body on")
  }
  ;(request as { textEffect: unknown }).textEffect = Effect.succeed(text)
  return Effect.succeed(request)
}
