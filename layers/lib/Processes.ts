// Other processes as a start sees them: running or not, their parent and command line. Used to
// tell a gateway or Postgres still running on a data dir from a pid file that a killed run left.
import { execFileSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { basename } from "node:path"

export interface ProcessInfo {
  readonly pid: number
  readonly ppid: number
  /** The command line's arguments, the program first. */
  readonly argv: ReadonlyArray<string>
}

/** Whether this system has a readable /proc (Linux); elsewhere `ps` answers. */
let procReadable: boolean | undefined
const hasProc = () => {
  if (procReadable === undefined) {
    try {
      readFileSync(`/proc/${process.pid}/stat`, "utf8")
      procReadable = true
    } catch {
      procReadable = false
    }
  }
  return procReadable
}

/** "(comm)" may hold spaces and parentheses, so the fields are read after the last ")". */
const fromProc = (pid: number): ProcessInfo | undefined => {
  let stat: string
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  } catch {
    return undefined
  }
  const [state, ppid] = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  if (state === "Z" || state === "X") return undefined // exited, not yet reaped by its parent
  let argv: ReadonlyArray<string> = []
  try {
    argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter((a) => a !== "")
  } catch {
    // gone meanwhile: judged by what stat said
  }
  return { pid, ppid: Number(ppid), argv }
}

/** `ps` exits 1 for a pid that does not exist; arguments are split at spaces (good enough here). */
const fromPs = (pid: number): ProcessInfo | undefined => {
  try {
    const out = execFileSync("ps", ["-o", "ppid=", "-o", "stat=", "-o", "command=", "-p", String(pid)], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"]
    }).trim()
    const match = /^(\d+)\s+(\S+)\s+(.*)$/.exec(out)
    if (match === null || match[2]!.startsWith("Z")) return undefined
    return { pid, ppid: Number(match[1]), argv: match[3]!.split(" ") }
  } catch {
    return undefined
  }
}

/** The running process `pid` (a zombie counts as gone), or undefined. */
export const processInfo = (pid: number): ProcessInfo | undefined => {
  if (!Number.isSafeInteger(pid) || pid <= 0) return undefined
  return hasProc() ? fromProc(pid) : fromPs(pid)
}

/** The first line of a pid file as a pid; undefined without a file or a number in it. */
export const readPidFile = (path: string): number | undefined => {
  let text: string
  try {
    text = readFileSync(path, "utf8")
  } catch {
    return undefined
  }
  const pid = Number((text.split("\n")[0] ?? "").trim())
  return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined
}

/** A Node.js process (`node dist/main.js`, tsx): what a gateway runs as. */
export const isNodeProcess = (info: ProcessInfo): boolean => /^node(js)?[\d.]*(\.exe)?$/.test(basename(info.argv[0] ?? ""))

/**
 * A process that exited and that its parent has not collected yet (a zombie): it still holds its
 * pid, so a program that checks a pid file with kill(pid, 0), as Postgres does, takes it for alive.
 */
export const isExitedUncollected = (pid: number): boolean => {
  if (!Number.isSafeInteger(pid) || pid <= 0 || processInfo(pid) !== undefined) return false
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as { code?: string }).code === "EPERM"
  }
}

/** Sends `signal`; false when the process is gone (or not ours to signal). */
export const signalProcess = (pid: number, signal: NodeJS.Signals): boolean => {
  try {
    process.kill(pid, signal)
    return true
  } catch {
    return false
  }
}
