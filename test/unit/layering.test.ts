// The house rules of layers/ (layers/README.md): each group imports only itself and the groups
// before it in GROUP_ORDER, nothing in layers/ imports src/ (the HTTP side), and no module
// imports itself through a chain. Type-only imports count: they tie modules together too.
import { readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, join, relative, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "vitest"

const ROOT = fileURLToPath(new URL("../..", import.meta.url))
const LAYERS = join(ROOT, "layers")

/** The groups of layers/, in order: a group may import the groups before it, never after. */
export const GROUP_ORDER = ["lib", "platform", "access", "ledger", "tenancy", "pipeline", "capabilities", "tools", "responses"] as const

type Graph = ReadonlyMap<string, ReadonlyArray<string>>

const sourceFiles = (dir: string): Array<string> =>
  readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    return statSync(path).isDirectory() ? sourceFiles(path) : name.endsWith(".ts") ? [path] : []
  })

/** Every module of layers/ (path relative to the repository) with the repository files it imports. */
const importGraph = (): Graph => {
  const graph = new Map<string, Array<string>>()
  for (const file of sourceFiles(LAYERS)) {
    const text = readFileSync(file, "utf8")
    const specifiers = [...text.matchAll(/(?:from|import)\s*\(?\s*"(\.{1,2}\/[^"]+)"/g)].map((m) => m[1]!)
    graph.set(
      relative(ROOT, file),
      specifiers.map((s) => relative(ROOT, resolve(dirname(file), s)).replace(/\.js$/, ".ts"))
    )
  }
  return graph
}

const groupOf = (path: string): string | undefined => {
  const [top, group] = path.split("/")
  return top === "layers" ? group : undefined
}

/** What breaks the rules, one line each. */
export const violations = (graph: Graph): Array<string> => {
  const found: Array<string> = []
  for (const [from, targets] of graph) {
    const fromGroup = groupOf(from)
    const fromRank = GROUP_ORDER.indexOf(fromGroup as (typeof GROUP_ORDER)[number])
    if (fromRank === -1) found.push(`${from}: not in a group of layers/README.md (${GROUP_ORDER.join(" < ")})`)
    for (const target of targets) {
      if (target.startsWith("src/")) found.push(`${from} imports ${target}: layers/ never imports src/`)
      const toGroup = groupOf(target)
      if (toGroup === undefined) continue
      const toRank = GROUP_ORDER.indexOf(toGroup as (typeof GROUP_ORDER)[number])
      if (fromRank !== -1 && toRank > fromRank) {
        found.push(`${from} imports ${target}: ${fromGroup} comes before ${toGroup}`)
      }
    }
  }
  return [...found, ...cycles(graph)]
}

/** Each import cycle once, as the chain that closes it. */
const cycles = (graph: Graph): Array<string> => {
  const found: Array<string> = []
  const state = new Map<string, "open" | "done">()
  const stack: Array<string> = []
  const visit = (node: string) => {
    state.set(node, "open")
    stack.push(node)
    for (const next of graph.get(node) ?? []) {
      if (!graph.has(next)) continue
      if (state.get(next) === "open") found.push(`cycle: ${[...stack.slice(stack.indexOf(next)), next].join(" -> ")}`)
      else if (state.get(next) === undefined) visit(next)
    }
    stack.pop()
    state.set(node, "done")
  }
  for (const node of graph.keys()) if (state.get(node) === undefined) visit(node)
  return found
}

describe("layers/ layering", () => {
  const graph = importGraph()

  it("reads every module of every group", () => {
    const groups = new Set([...graph.keys()].map(groupOf))
    expect([...groups].sort()).toEqual([...GROUP_ORDER].sort())
    expect(graph.size).toBeGreaterThan(60)
  })

  it("imports only down the group order, never into src/, without cycles", () => {
    expect(violations(graph)).toEqual([])
  })

  it("reports a ledger module that imports the pipeline, an import of src/, and a cycle", () => {
    const broken = new Map(graph)
    broken.set("layers/ledger/BudgetLedger.ts", [...graph.get("layers/ledger/BudgetLedger.ts")!, "layers/pipeline/Inference.ts"])
    broken.set("layers/lib/Ids.ts", ["src/App.ts"])
    broken.set("layers/platform/Metrics.ts", ["layers/platform/Crypto.ts"])
    broken.set("layers/platform/Crypto.ts", ["layers/platform/Metrics.ts"])
    expect(violations(broken)).toEqual(expect.arrayContaining([
      "layers/ledger/BudgetLedger.ts imports layers/pipeline/Inference.ts: ledger comes before pipeline",
      "layers/lib/Ids.ts imports src/App.ts: layers/ never imports src/",
      expect.stringMatching(/^cycle: layers\/platform\/(Metrics|Crypto)\.ts -> /)
    ]))
  })
})
