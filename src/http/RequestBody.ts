// The request body, read once straight from the Node request: the platform's reader (a cached
// Effect with a scoped stream per request) cost about 90 us a call, a tenth of a chat completion's
// CPU. The handler's payload decode then parses the text read here.
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
    source.once("error", (cause) =>
      resume(Effect.die(new HttpServerError.RequestError({ request, reason: "Transport", cause }))))
  })

/** The request with its body already read: `text` and `json` answer from it (also after `modify`). */
export const withBodyText = (
  request: HttpServerRequest.HttpServerRequest,
  text: string
): HttpServerRequest.HttpServerRequest => {
  // The Node request memoises its text in `textEffect`: filling it is the cheap way (a wrapper
  // object below costs a property lookup miss on every later access).
  if ("textEffect" in request) {
    ;(request as { textEffect: unknown }).textEffect = Effect.succeed(text)
    return request
  }
  const wrapped: HttpServerRequest.HttpServerRequest = Object.create(request)
  return Object.defineProperties(wrapped, {
    text: { value: Effect.succeed(text) },
    json: {
      get: () =>
        Effect.try({
          try: () => (text === "" ? null : JSON.parse(text)) as unknown,
          catch: (cause) => new HttpServerError.RequestError({ request: wrapped, reason: "Decode", cause })
        })
    },
    modify: { value: (options: Parameters<HttpServerRequest.HttpServerRequest["modify"]>[0]) => withBodyText(request.modify(options), text) }
  })
}
