// GET /docs: the Scalar API reference over the gateway's OpenAPI document, and
// GET /docs/scalar.js: the viewer script, served by this host so the page works offline.
//
// The only installed copy of Scalar's standalone script is the one @effect/platform inlines as a
// string literal in its internal `httpApiScalar.js` module (3.4 MB). Importing that module would
// keep its source text in the heap for the life of the process, so the script is read from the
// file and decoded per request instead, one request at a time, and browsers revalidate it by ETag.
import { HttpApi, HttpApiBuilder, HttpServerRequest, HttpServerResponse, OpenApi } from "@effect/platform"
import { Effect } from "effect"
import { readFile, stat } from "node:fs/promises"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"

export const DOCS_PATH = "/docs"
export const DOCS_SCRIPT_PATH = "/docs/scalar.js"

/** The @effect/platform module holding Scalar's standalone script (`export const javascript="…"`). */
const scalarModuleFile = () =>
  join(dirname(createRequire(import.meta.url).resolve("@effect/platform/HttpApiScalar")), "internal", "httpApiScalar.js")

/**
 * The script from the module's source: its one string literal is valid JSON. The trailing
 * source-map comment names a file jsDelivr has and this host has not, so it is dropped.
 */
const decodeScript = (moduleSource: string): string => {
  const start = moduleSource.indexOf("=\"") + 1
  const end = moduleSource.lastIndexOf("\";") + 1
  const script: string = JSON.parse(moduleSource.slice(start, end))
  return script.replace(/\n\/\/# sourceMappingURL=\S*\s*$/, "\n")
}

/** JSON inside a <script> element: no `<` (closing tags) and no U+2028/2029. */
const scriptJson = (value: unknown) =>
  JSON.stringify(value).replace(/</g, "\\u003c").replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029")

const htmlText = (text: string) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")

const page = (spec: OpenApi.OpenAPISpec) => `<!doctype html>
<html>
  <head>
    <meta charset="utf-8" />
    <title>${htmlText(spec.info.title)}</title>
    <meta name="viewport" content="width=device-width, initial-scale=1" />
  </head>
  <body>
    <script id="api-reference" type="application/json">${scriptJson(spec)}</script>
    <script>
      document.getElementById("api-reference").dataset.configuration = JSON.stringify(${
  // Scalar's default fonts come from fonts.scalar.com; the system fonts work offline.
  scriptJson({ _integration: "html", withDefaultFonts: false })})
    </script>
    <script src="${DOCS_SCRIPT_PATH}"></script>
  </body>
</html>`

export const DocsPageLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    const { api } = yield* HttpApi.Api
    const html = HttpServerResponse.html(page(OpenApi.fromApi(api)))
    const file = scalarModuleFile()
    const { size, mtimeMs } = yield* Effect.promise(() => stat(file))
    const etag = `"${size.toString(16)}-${Math.trunc(mtimeMs).toString(16)}"`
    // One decode at a time: each holds about 15 MB for a few milliseconds, and the route is public.
    const decoding = yield* Effect.makeSemaphore(1)
    const script = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const headers = { etag, "cache-control": "public, max-age=3600" }
      if (request.headers["if-none-match"] === etag) return HttpServerResponse.empty({ status: 304, headers })
      const body = yield* decoding.withPermits(1)(Effect.promise(() => readFile(file, "utf8")).pipe(Effect.map(decodeScript)))
      return HttpServerResponse.text(body, { contentType: "text/javascript; charset=utf-8", headers })
    })
    yield* router.get(DOCS_PATH, Effect.succeed(html))
    yield* router.get(DOCS_SCRIPT_PATH, script)
  })
)
