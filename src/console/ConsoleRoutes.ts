// The web console's static files on the API host: GET / redirects to /console, GET /console is
// the single page (client routes live in the URL fragment, so no fallback route is needed) and
// GET /console/assets/{file} its content-hashed script and style sheet, all from the bundle that
// `npm run build` writes to dist/console (src/console/Build.ts). Every answer carries a strict CSP.
import { HttpApiBuilder, HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { createHash } from "node:crypto"
import { readFile } from "node:fs/promises"
import { join } from "node:path"
import { packageFile } from "../../layers/lib/PackageRoot.js"

export const CONSOLE_PATH = "/console"
export const CONSOLE_ASSETS_PATH = "/console/assets"
export const CONSOLE_DIST = "dist/console"

/** Only the bundle's own files: scripts, a style sheet, no inline code and no other origin. */
export const CONSOLE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "object-src 'none'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'self'"
].join("; ")

const securityHeaders = {
  "content-security-policy": CONSOLE_CSP,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY"
}

const contentTypes: Record<string, string> = {
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".map": "application/json; charset=utf-8",
  ".svg": "image/svg+xml"
}

/** An asset name as the bundler writes it (`app-3FZ2KQ.js`): no path, no hidden files. */
const assetName = /^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9]+)+$/

const notBuilt = HttpServerResponse.text(
  "The web console is not built. Run `npm run build` (npm start does it) and reload this page.\n",
  { status: 503, headers: { ...securityHeaders, "cache-control": "no-store" } }
)

const notFound = HttpServerResponse.text("Not found\n", { status: 404, headers: securityHeaders })

const readIfPresent = (path: string) =>
  Effect.promise(() => readFile(path).then((bytes): Buffer | undefined => bytes, () => undefined))

/** The page: revalidated by ETag on every load, so a rebuild shows at once. */
const page = Effect.gen(function*() {
  const html = yield* readIfPresent(packageFile(join(CONSOLE_DIST, "index.html")))
  if (html === undefined) return notBuilt
  const etag = `"${createHash("sha256").update(html).digest("base64url").slice(0, 22)}"`
  const headers = { ...securityHeaders, etag, "cache-control": "no-cache" }
  const request = yield* HttpServerRequest.HttpServerRequest
  if (request.headers["if-none-match"] === etag) return HttpServerResponse.empty({ status: 304, headers })
  return HttpServerResponse.uint8Array(html, { contentType: "text/html; charset=utf-8", headers })
})

/** Hashed names change with their content: cached for a year. */
const asset = Effect.gen(function*() {
  const { file } = yield* HttpRouter.params
  if (file === undefined || !assetName.test(file)) return notFound
  const type = contentTypes[file.slice(file.lastIndexOf("."))]
  if (type === undefined) return notFound
  const bytes = yield* readIfPresent(packageFile(join(CONSOLE_DIST, "assets", file)))
  if (bytes === undefined) return notFound
  return HttpServerResponse.uint8Array(bytes, {
    contentType: type,
    headers: { ...securityHeaders, "cache-control": "public, max-age=31536000, immutable" }
  })
})

const toConsole = HttpServerResponse.empty({ status: 302, headers: { ...securityHeaders, location: CONSOLE_PATH } })

export const ConsoleRoutesLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    yield* router.get("/", Effect.succeed(toConsole))
    // The router ignores a trailing slash: this serves /console/ too.
    yield* router.get(CONSOLE_PATH, page)
    yield* router.get(`${CONSOLE_ASSETS_PATH}/:file`, asset)
  })
)
