// Runs README.md's code blocks as a newcomer would paste them: ```sh blocks in one bash session
// (variables carry over), ```js blocks each as its own ESM module with the variables that session
// exported, ```sql blocks through psql against the embedded database. A block preceded by
// `<!-- readme: skip (reason) -->` is not run; the reason is required.
import { type ChildProcess, spawn } from "node:child_process"
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { join } from "node:path"

export type Lang = "sh" | "js" | "sql"

export interface Block {
  readonly lang: string
  readonly code: string
  /** 1-based line of the opening fence in README.md. */
  readonly line: number
  /** The reason of a `readme: skip` marker, when there is one. */
  readonly skip: string | undefined
}

const FENCE = /^(\s*)```(\S*)\s*$/
const SKIP = /^<!--\s*readme:\s*skip\b(.*?)-->$/

/**
 * The fenced blocks of a Markdown text, in order, with their indentation removed (blocks inside
 * list items are indented). A skip marker must be the last non-blank line before the fence; one
 * without a reason in parentheses is an error.
 */
export const parseBlocks = (markdown: string): ReadonlyArray<Block> => {
  const lines = markdown.split("\n")
  const blocks: Array<Block> = []
  for (let i = 0; i < lines.length; i++) {
    const open = FENCE.exec(lines[i]!)
    if (open === null) continue
    const indent = open[1]!.length
    const body: Array<string> = []
    let j = i + 1
    for (; j < lines.length; j++) {
      const line = lines[j]!
      if (/^\s*```\s*$/.test(line)) break
      body.push(line.slice(Math.min(indent, line.length - line.trimStart().length)))
    }
    if (j === lines.length) throw new Error(`README.md:${i + 1}: the code block is never closed`)
    let k = i - 1
    while (k >= 0 && lines[k]!.trim() === "") k--
    const marker = k >= 0 ? SKIP.exec(lines[k]!.trim()) : null
    let skip: string | undefined
    if (marker !== null) {
      const reason = /^\s*\((.+)\)\s*$/.exec(marker[1]!)
      if (reason === null) throw new Error(`README.md:${k + 1}: a readme skip marker needs a reason: <!-- readme: skip (why) -->`)
      skip = reason[1]!.trim()
    }
    blocks.push({ lang: open[2]!, code: body.join("\n") + "\n", line: i + 1, skip })
    i = j
  }
  return blocks
}

/** How a block is named in failures: its line and its first non-blank line. */
export const blockName = (block: Block): string => {
  const first = block.code.split("\n").find((l) => l.trim() !== "") ?? ""
  return `README.md:${block.line} (${block.lang}) ${first.trim().slice(0, 80)}`
}

/**
 * The README's fixed local addresses (`127.0.0.1:<port>`) pointed at ports that are really free:
 * the gateway's listeners, and the examples' own servers.
 */
export const rewritePorts = (code: string, ports: Readonly<Record<number, number>>): string =>
  Object.entries(ports).reduce((text, [from, to]) => text.replaceAll(`127.0.0.1:${from}`, `127.0.0.1:${to}`), code)

/** A TCP port nothing listens on right now (the OS picks it). */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })

/**
 * Marks the curl commands whose line ends in an expected-status comment (`# 401`, `# 204 ...`):
 * `curl` becomes `curl __readme_expect=401`, which the session's curl wrapper reads. A command
 * spans its backslash-continued lines; heredoc bodies are left alone.
 */
export const markExpectedStatuses = (code: string): string => {
  const lines = code.split("\n")
  const out: Array<string> = []
  let heredoc: string | undefined
  let command: Array<string> = []
  const flush = () => {
    if (command.length === 0) return
    const last = command[command.length - 1]!
    const status = /#\s*([1-5]\d\d)(\s|$)/.exec(last.slice(commentStart(last)))
    out.push(
      ...(status === null ? command : command.map((l) => l.replace(/(^|[\s;|&($])curl(?=\s)/g, `$1curl __readme_expect=${status[1]}`)))
    )
    command = []
  }
  for (const line of lines) {
    if (heredoc !== undefined) {
      out.push(line)
      if (line.trim() === heredoc) heredoc = undefined
      continue
    }
    command.push(line)
    const opens = /<<-?\s*['"]?(\w+)['"]?/.exec(line)
    if (opens !== null) {
      flush()
      heredoc = opens[1]!
      continue
    }
    if (!line.endsWith("\\")) flush()
  }
  flush()
  return out.join("\n")
}

/** Index of a line's `#` comment (outside quotes), or its length. */
const commentStart = (line: string): number => {
  let quote: string | undefined
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!
    if (quote !== undefined) {
      if (c === quote) quote = undefined
      else if (c === "\\" && quote === "\"") i++
    } else if (c === "'" || c === "\"") quote = c
    else if (c === "#" && (i === 0 || /\s/.test(line[i - 1]!))) return i
  }
  return line.length
}

export interface Outcome {
  readonly ok: boolean
  readonly output: string
}

const DONE = "__README_DONE__"

/**
 * The bash prelude. A failing command ends its block (errexit per block: the ERR trap returns from
 * the block, sourced inside a function so that `return` works at its top level, or exits a
 * subshell of it), and the session goes on with the next block so
 * that every broken block is reported, not only the first. `curl` is wrapped: a connection error
 * or an HTTP status >= 400 fails, unless the command asked for an exact status; a failure is also
 * recorded in a file, so one hidden in `export X=$(curl ...)` still fails its block.
 */
const prelude = (dir: string) => `
set -o pipefail -o errtrace
__readme_dir=${JSON.stringify(dir)}
trap '__readme_rc=$?; if (( BASH_SUBSHELL > 0 )); then exit $__readme_rc; elif (( \${#FUNCNAME[@]} > 0 )); then return $__readme_rc; fi' ERR
trap 'jobs -p | xargs -r kill 2>/dev/null' EXIT
curl() {
  local expect=""
  if [[ "\${1-}" == __readme_expect=* ]]; then expect="\${1#__readme_expect=}"; shift; fi
  local headers="$__readme_dir/curl-headers.$BASHPID.$RANDOM"
  local rc=0
  command curl -D "$headers" "$@" || rc=$?
  if (( rc != 0 )); then
    printf '\\nreadme: curl exited %s (no answer): curl %s\\n' "$rc" "$*" >&2
    : > "$__readme_dir/failed"
    rm -f "$headers"
    return "$rc"
  fi
  local status
  status=$(awk '/^HTTP\\//{s=$2} END{print s}' "$headers" 2>/dev/null || true)
  rm -f "$headers"
  if [[ -n "$expect" && "$status" != "$expect" ]] || [[ -z "$expect" && ! "$status" =~ ^[1-3][0-9][0-9]$ ]]; then
    printf '\\nreadme: HTTP %s, expected %s: curl %s\\n' "\${status:-none}" "\${expect:-below 400}" "$*" >&2
    : > "$__readme_dir/failed"
    return 22
  fi
}
__readme_run() { source "$1"; }
while IFS= read -r -u 3 __readme_block; do
  rm -f "$__readme_dir/failed"
  __readme_run "$__readme_block"
  __readme_rc=$?
  [[ -e "$__readme_dir/failed" ]] && __readme_rc=1
  env -0 > "$__readme_dir/env"
  printf '\\n${DONE} %s\\n' "$__readme_rc"
done
`

/** One bash session for the README's sh blocks, in `dir` (its cwd). */
export class ShellSession {
  private readonly child: ChildProcess
  private stdout = ""
  private stderr = ""
  private count = 0
  private exited = false

  constructor(private readonly dir: string, env: Record<string, string>) {
    // Its own process group, so that stop() reaches what the blocks start in the background.
    this.child = spawn("bash", ["--noprofile", "--norc", "-c", prelude(dir)], {
      cwd: dir,
      env,
      detached: true,
      stdio: ["ignore", "pipe", "pipe", "pipe"]
    })
    this.child.stdout!.setEncoding("utf8").on("data", (t: string) => (this.stdout += t))
    this.child.stderr!.setEncoding("utf8").on("data", (t: string) => (this.stderr += t))
    this.child.once("exit", () => (this.exited = true))
    // Last resort: nothing a block started outlives the test worker.
    process.once("exit", () => this.killGroup())
  }

  /** Runs one block; resolves when the session reports it done (or dies, or times out). */
  run(code: string, timeoutMs: number): Promise<Outcome> {
    const file = join(this.dir, `.readme-block-${++this.count}.sh`)
    writeFileSync(file, code)
    this.stdout = ""
    this.stderr = ""
    return new Promise((resolve) => {
      const started = Date.now()
      const poll = setInterval(() => {
        const done = new RegExp(`\\n${DONE} (\\d+)\\n`).exec(this.stdout)
        const output = () => (this.stdout.replace(new RegExp(`\\n${DONE} \\d+\\n[^]*$`), "") + this.stderr).trim()
        if (done !== null) {
          clearInterval(poll)
          resolve({ ok: done[1] === "0", output: output() })
        } else if (this.exited) {
          clearInterval(poll)
          resolve({ ok: false, output: `${output()}\n(the bash session ended)` })
        } else if (Date.now() - started > timeoutMs) {
          clearInterval(poll)
          void this.stop()
          resolve({ ok: false, output: `${output()}\n(no end within ${timeoutMs} ms; the session was stopped)` })
        }
      }, 20)
      const input = this.child.stdio[3] as NodeJS.WritableStream | null
      if (this.exited || input === null) {
        clearInterval(poll)
        resolve({ ok: false, output: "(the bash session had already ended)" })
        return
      }
      input.write(`${file}\n`)
    })
  }

  /** The variables the session has exported so far (after its last block). */
  exportedEnv(): Record<string, string> {
    const file = join(this.dir, "env")
    if (!existsSync(file)) return {}
    const env: Record<string, string> = {}
    for (const entry of readFileSync(file, "utf8").split("\0")) {
      const at = entry.indexOf("=")
      if (at > 0) env[entry.slice(0, at)] = entry.slice(at + 1)
    }
    return env
  }

  /** Ends the session (its EXIT trap stops its background jobs), then whatever is left of its group. */
  async stop(): Promise<void> {
    if (!this.exited) (this.child.stdio[3] as NodeJS.WritableStream | null)?.end()
    for (let i = 0; i < 100 && !this.exited; i++) await new Promise((r) => setTimeout(r, 20))
    this.killGroup()
  }

  private killGroup(): void {
    const group = this.child.pid
    if (group === undefined) return
    try {
      process.kill(-group, "SIGKILL")
    } catch {
      // the group is gone already
    }
  }
}

/** Runs `command args` in `cwd` to its end; fails on a non-zero exit or after `timeoutMs`. */
export const runToEnd = (
  command: string,
  args: ReadonlyArray<string>,
  options: { readonly cwd: string; readonly env: Record<string, string>; readonly timeoutMs: number }
): Promise<Outcome> =>
  new Promise((resolve) => {
    let output = ""
    const child = spawn(command, args, { cwd: options.cwd, env: options.env, stdio: ["ignore", "pipe", "pipe"] })
    child.stdout.setEncoding("utf8").on("data", (t: string) => (output += t))
    child.stderr.setEncoding("utf8").on("data", (t: string) => (output += t))
    const timer = setTimeout(() => {
      output += `\n(no end within ${options.timeoutMs} ms; killed)`
      child.kill("SIGKILL")
    }, options.timeoutMs)
    child.once("error", (e) => {
      clearTimeout(timer)
      resolve({ ok: false, output: `${output}\n${e.message}`.trim() })
    })
    child.once("close", (code) => {
      clearTimeout(timer)
      resolve({ ok: code === 0, output: output.trim() })
    })
  })

/** A ```js block as its own module in `dir`. */
export const runJs = (dir: string, index: number, code: string, env: Record<string, string>, timeoutMs: number) => {
  const file = join(dir, `.readme-block-${index}.mjs`)
  writeFileSync(file, code)
  return runToEnd(process.execPath, [file], { cwd: dir, env, timeoutMs })
}

/** `<like this>`: a value the reader must fill in; such a block cannot run as printed. */
export const hasPlaceholder = (code: string): boolean => /<[a-z][a-z0-9 _-]*>/i.test(code)

/**
 * A ```sql block through psql on `databaseUrl`; its `:'NAME'` / `:NAME` variables come from
 * the session's exported environment (as `psql -v NAME=...` would pass them).
 */
export const runSql = (dir: string, index: number, code: string, databaseUrl: string, env: Record<string, string>, timeoutMs: number) => {
  const file = join(dir, `.readme-block-${index}.sql`)
  writeFileSync(file, code)
  const variables = [...new Set([...code.matchAll(/:'?([A-Za-z_][A-Za-z0-9_]*)'?/g)].map((m) => m[1]!))]
    .filter((name) => env[name] !== undefined)
    .flatMap((name) => ["-v", `${name}=${env[name]}`])
  return runToEnd("psql", [databaseUrl, "-X", "-v", "ON_ERROR_STOP=1", ...variables, "-f", file], { cwd: dir, env, timeoutMs })
}

/** Removes a directory tree, ignoring what is already gone. */
export const removeTree = (dir: string) => rmSync(dir, { recursive: true, force: true })
