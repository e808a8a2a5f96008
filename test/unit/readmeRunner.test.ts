// The README runner's own rules (test/support/ReadmeRunner.ts): how blocks are found and skipped,
// how expected statuses are marked, and that the bash session fails a broken block, goes on with
// the next one and keeps its variables; its curl fails on no answer and on HTTP >= 400 unless the
// line names the status. Real bash, real curl against a local HTTP server.
import { mkdtempSync } from "node:fs"
import { createServer, type Server } from "node:http"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  blockName,
  freePort,
  hasPlaceholder,
  markExpectedStatuses,
  parseBlocks,
  removeTree,
  rewritePorts,
  runJs,
  ShellSession
} from "../support/ReadmeRunner.js"

const fence = "```"

describe("parseBlocks", () => {
  it("finds fenced blocks with their language and line, unindents list items, reads skip reasons", () => {
    const markdown = [
      "# Title", //                                       1
      "", //                                              2
      `${fence}sh`, //                                    3
      "echo one", //                                      4
      fence, //                                           5
      "1. A step:", //                                    6
      "", //                                              7
      "   <!-- readme: skip (needs a browser) -->", //    8
      `   ${fence}js`, //                                 9
      "   console.log(2)", //                             10
      `   ${fence}`, //                                   11
      `${fence}text`, //                                  12
      "output", //                                        13
      fence //                                            14
    ].join("\n")
    const blocks = parseBlocks(markdown)
    expect(blocks).toEqual([
      { lang: "sh", code: "echo one\n", line: 3, skip: undefined },
      { lang: "js", code: "console.log(2)\n", line: 9, skip: "needs a browser" },
      { lang: "text", code: "output\n", line: 12, skip: undefined }
    ])
    expect(blockName(blocks[1]!)).toBe("README.md:9 (js) console.log(2)")
  })

  it("refuses a skip marker without a reason, and a block never closed", () => {
    expect(() => parseBlocks(`<!-- readme: skip -->\n${fence}sh\nls\n${fence}\n`)).toThrow(/README.md:1: a readme skip marker needs a reason/)
    expect(() => parseBlocks(`${fence}sh\nls\n`)).toThrow(/README.md:1: the code block is never closed/)
  })
})

describe("block rewriting", () => {
  it("marks every curl of a command whose last line names a status; heredocs and other commands stay", () => {
    const code = [
      "curl -s -o /dev/null -w '%{http_code}\\n' $BASE/x \\",
      "  -H \"a: b\"   # 204",
      "X=$(curl -s $BASE/y -H \"Authorization: Bearer $(json \"$K\" raw_key)\")   # 401 invalid_api_key",
      "curl -s $BASE/z   # {\"data\":[]}",
      "cat > f.mjs <<'EOF'",
      "curl -s x   # 404",
      "EOF",
      "# 1. a comment with no command"
    ].join("\n")
    expect(markExpectedStatuses(code).split("\n")).toEqual([
      "curl __readme_expect=204 -s -o /dev/null -w '%{http_code}\\n' $BASE/x \\",
      "  -H \"a: b\"   # 204",
      "X=$(curl __readme_expect=401 -s $BASE/y -H \"Authorization: Bearer $(json \"$K\" raw_key)\")   # 401 invalid_api_key",
      "curl -s $BASE/z   # {\"data\":[]}",
      "cat > f.mjs <<'EOF'",
      "curl -s x   # 404",
      "EOF",
      "# 1. a comment with no command"
    ])
  })

  it("points fixed local ports elsewhere and spots placeholders", () => {
    expect(rewritePorts("curl http://127.0.0.1:8080/v1 http://127.0.0.1:8081/mcp 127.0.0.1:80800", { 8080: 1234, 8081: 5678 }))
      .toBe("curl http://127.0.0.1:1234/v1 http://127.0.0.1:5678/mcp 127.0.0.1:12340")
    expect(hasPlaceholder("WHERE b.id = '<budget id>'")).toBe(true)
    expect(hasPlaceholder("WHERE b.id = :'BUDGET_ID' AND a < b AND c > d")).toBe(false)
  })
})

describe("the bash session", () => {
  let dir = ""
  let server: Server
  let base = ""
  let session: ShellSession

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "readme-runner-"))
    server = createServer((req, res) => {
      const status = Number(new URL(req.url ?? "/", "http://x").searchParams.get("status") ?? "200")
      res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify({ status }))
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    const address = server.address()
    base = `http://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}`
    session = new ShellSession(dir, { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dir })
  })
  afterAll(async () => {
    await session?.stop()
    await new Promise((resolve) => server?.close(resolve))
    removeTree(dir)
  })

  const run = (code: string) => session.run(markExpectedStatuses(code), 30_000)

  it("runs blocks in one shell: variables carry over, a failing command ends its block, the next block runs", async () => {
    expect(await run("A=1\nexport B=2\necho ok")).toEqual({ ok: true, output: "ok" })
    const broken = await run("false\necho never")
    expect(broken.ok).toBe(false)
    expect(broken.output).not.toContain("never")
    expect(await run("echo \"$A $B\"")).toEqual({ ok: true, output: "1 2" })
    expect(session.exportedEnv().B).toBe("2")
    expect(session.exportedEnv().A).toBeUndefined()
    // A failure inside a command substitution, and in a function, ends the block too.
    expect((await run("X=$(echo a; false; echo b)\necho never")).ok).toBe(false)
    expect((await run("f() { false; echo never; }\nf")).ok).toBe(false)
    // Conditions are not failures.
    expect(await run("if false; then echo no; fi\nfalse || echo handled")).toEqual({ ok: true, output: "handled" })
  })

  it("curl: a 2xx passes; a 4xx, or no answer, fails even where the status would be lost; a named status is required exactly", async () => {
    expect(await run(`curl -s "${base}/?status=201"`)).toEqual({ ok: true, output: "{\"status\":201}" })
    expect((await run(`curl -s "${base}/?status=404"\necho never`)).output).toMatch(/readme: HTTP 404, expected below 400/)
    // `export X=$(...)` hides the status from bash; the wrapper's record still fails the block.
    const hidden = await run(`export X=$(curl -s "${base}/?status=500")\necho "went on"`)
    expect(hidden.ok).toBe(false)
    expect(hidden.output).toContain("went on")
    const port = await freePort()
    expect((await run(`curl -s http://127.0.0.1:${port}/`)).output).toMatch(/readme: curl exited 7 \(no answer\)/)
    expect(await run(`curl -s -o /dev/null -w '%{http_code}\\n' "${base}/?status=401"   # 401`)).toEqual({ ok: true, output: "401" })
    expect((await run(`curl -s "${base}/?status=200"   # 204`)).output).toMatch(/readme: HTTP 200, expected 204/)
  })

  it("a js block runs as its own module with the session's exported variables; a throw fails it", async () => {
    await run("export GREETING=hello")
    expect(await runJs(dir, 1, "console.log(process.env.GREETING)\n", session.exportedEnv(), 30_000)).toEqual({ ok: true, output: "hello" })
    expect((await runJs(dir, 2, "throw new Error('broken')\n", session.exportedEnv(), 30_000)).ok).toBe(false)
  })
})
