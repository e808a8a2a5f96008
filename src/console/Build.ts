// Bundles the web console (src/console/app) into dist/console: index.html plus content-hashed
// assets/app-*.js and app-*.css (Preact, uPlot and its style sheet included; nothing fetched from
// another origin). `npm run build` runs this file; the browser tests call buildConsole directly.
import { build } from "esbuild"
import { mkdirSync, rmSync, writeFileSync } from "node:fs"
import { basename, join } from "node:path"
import { pathToFileURL } from "node:url"
import { packageFile } from "../../layers/lib/PackageRoot.js"
import { CONSOLE_ASSETS_PATH, CONSOLE_DIST } from "./ConsoleRoutes.js"

const indexHtml = (script: string, styles: string | undefined) => `<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <title>Gateway console</title>
    <link rel="icon" href="data:," />
${styles === undefined ? "" : `    <link rel="stylesheet" href="${CONSOLE_ASSETS_PATH}/${styles}" />\n`}    <script type="module" src="${CONSOLE_ASSETS_PATH}/${script}"></script>
  </head>
  <body>
    <div id="app"></div>
  </body>
</html>
`

/** Writes the bundle; answers the directory it wrote. */
export const buildConsole = async (outDir = packageFile(CONSOLE_DIST)): Promise<string> => {
  rmSync(outDir, { recursive: true, force: true })
  const assets = join(outDir, "assets")
  mkdirSync(assets, { recursive: true })
  const result = await build({
    entryPoints: { app: packageFile("src/console/app/main.tsx") },
    tsconfig: packageFile("src/console/app/tsconfig.json"),
    bundle: true,
    format: "esm",
    target: "es2022",
    platform: "browser",
    jsx: "automatic",
    jsxImportSource: "preact",
    minify: true,
    legalComments: "none",
    entryNames: "[name]-[hash]",
    outdir: assets,
    metafile: true,
    logLevel: "warning"
  })
  const entry = Object.entries(result.metafile.outputs).find(([, output]) => output.entryPoint !== undefined)
  if (entry === undefined) throw new Error("the console bundle has no entry point output")
  const [script, output] = entry
  const styles = output.cssBundle === undefined ? undefined : basename(output.cssBundle)
  writeFileSync(join(outDir, "index.html"), indexHtml(basename(script), styles))
  return outDir
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await buildConsole()
}
