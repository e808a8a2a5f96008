// Files shipped with the package (the seed catalog): found from the package root, the nearest
// folder above this module with a package.json, so the path holds both for the sources
// (layers/lib/) and for the bundle (dist/main.js).
import { existsSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const packageRoot = (): string => {
  let dir = dirname(fileURLToPath(import.meta.url))
  while (!existsSync(join(dir, "package.json")) && dirname(dir) !== dir) dir = dirname(dir)
  return dir
}

/** `path` (relative to the package root) as an absolute path. */
export const packageFile = (path: string): string => join(packageRoot(), path)
