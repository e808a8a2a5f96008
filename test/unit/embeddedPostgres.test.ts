// Which directory stops another user on the way to a path (the check the embedded Postgres makes
// under root before handing the server to user postgres): owner, group and other search bits,
// for an existing user and for one that does not exist yet. Runs as any user.
import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { firstUnenterable } from "../../layers/platform/EmbeddedPostgres.js"

const base = mkdtempSync(join(tmpdir(), "gateway-unenterable-"))
afterAll(() => rmSync(base, { recursive: true, force: true }))

/** base/<name>/inner/leaf with `name` at `mode`; base itself passable by everyone. */
const tree = (name: string, mode: number) => {
  chmodSync(base, 0o755)
  const dir = join(base, name)
  mkdirSync(join(dir, "inner", "leaf"), { recursive: true })
  chmodSync(dir, mode)
  return { dir, leaf: join(dir, "inner", "leaf") }
}

const owner = () => ({ uid: statSync(base).uid, gid: statSync(base).gid })
const stranger = { uid: 4_000_001, gid: 4_000_001 }

describe("firstUnenterable", () => {
  it("names the first directory without search permission for the user, with its mode", () => {
    const { dir, leaf } = tree("private", 0o700)
    expect(firstUnenterable(leaf, stranger)).toEqual({ dir, mode: "700" })
    expect(firstUnenterable(leaf, undefined)).toEqual({ dir, mode: "700" }) // a user created later: "other" bits
    expect(firstUnenterable(leaf, owner())).toBeUndefined() // the owner's own bits allow it
  })

  it("search (x) is enough; read is not needed, and the group bits apply to the group", () => {
    const { leaf: passable } = tree("search-only", 0o711)
    expect(firstUnenterable(passable, stranger)).toBeUndefined()
    const { dir, leaf } = tree("group-only", 0o710)
    expect(firstUnenterable(leaf, stranger)).toEqual({ dir, mode: "710" })
    expect(firstUnenterable(leaf, { uid: stranger.uid, gid: owner().gid })).toBeUndefined()
  })

  it("follows a symbolic link to where the kernel walks: the locked target is named", () => {
    const { dir, leaf } = tree("behind-link", 0o700)
    const link = join(base, "open-looking-link")
    symlinkSync(join(dir, "inner"), link)
    expect(firstUnenterable(join(link, "leaf", "pg"), stranger)).toEqual({ dir, mode: "700" })
    expect(firstUnenterable(join(link, "leaf"), owner())).toBeUndefined()
    expect(leaf).toContain(dir)
  })

  it("stops at a directory that does not exist yet (the gateway creates it)", () => {
    const { dir } = tree("open", 0o755)
    expect(firstUnenterable(join(dir, "not", "yet"), stranger)).toBeUndefined()
    expect(firstUnenterable(join(dir, "not", "yet"), undefined)).toBeUndefined()
  })
})
