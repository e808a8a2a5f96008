// The skills tool family as a unit over a fresh database: create, full-text find, fetch, reviews
// (one per user, not on one's own skill), delete by the author only, platform isolation.
import { expect, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer } from "effect"
import { DatabaseLive } from "../../layers/platform/Database.js"
import type { EndUserPrincipal } from "../../layers/access/KeyAuth.js"
import { Skills } from "../../layers/tools/Skills.js"
import { TestDatabaseUrlLive } from "../support/TestDatabase.js"

const TestLayer = Skills.Default.pipe(Layer.provideMerge(DatabaseLive), Layer.provide(TestDatabaseUrlLive))

const call = (tool: string, caller: EndUserPrincipal, args: Record<string, unknown>) =>
  Effect.gen(function*() {
    const skills = yield* Skills
    const result = yield* skills.tools.find((t) => t.name === tool)!.run(caller, args)
    const body = result.content[0]!.text
    return { isError: result.isError === true, body: result.isError ? body : JSON.parse(body) }
  })

layer(TestLayer, { timeout: "60 seconds", excludeTestServices: true })("Skills", (it) => {
  it.effect("create, find, fetch, review, delete", () =>
    Effect.gen(function*() {
      const sql = yield* PgClient.PgClient
      const [p1] = yield* sql<{ id: string }>`INSERT INTO platforms (name, skills_enabled) VALUES ('p1', true) RETURNING id`
      const [p2] = yield* sql<{ id: string }>`INSERT INTO platforms (name) VALUES ('p2') RETURNING id`
      const users = yield* sql<{ id: string }>`INSERT INTO end_users (platform_id, external_id, display_name)
        VALUES (${p1!.id}, 'a', 'a'), (${p1!.id}, 'b', 'b'), (${p2!.id}, 'c', 'c') RETURNING id`
      const as = (i: number, platformId: string): EndUserPrincipal =>
        ({ _tag: "EndUserKey", keyId: "k", platformId, endUserId: users[i]!.id, scopes: ["inference"] })
      const alice = as(0, p1!.id)
      const bob = as(1, p1!.id)
      const carol = as(2, p2!.id)

      expect(yield* (yield* Skills).enabled(p1!.id)).toBe(true)
      expect(yield* (yield* Skills).enabled(p2!.id)).toBe(false)
      const created = yield* call("create_skill", alice, { name: "Refund a customer", description: "Steps for refunds in Zendesk", body: "# Refunds\n1. Find the ticket" })
      expect(created.body).toMatchObject({ name: "Refund a customer", created_by: alice.endUserId, rating: null, review_count: 0 })
      yield* call("create_skill", alice, { name: "Weekly report", description: "Summarise GitHub issues", body: "..." })
      expect((yield* call("create_skill", alice, { name: "", description: "x", body: "y" })).isError).toBe(true)

      const found = yield* call("find_skill", bob, { query: "refunds zendesk" })
      expect(found.body.skills.map((s: any) => s.name)).toEqual(["Refund a customer"])
      expect(found.body.skills[0].body).toBeUndefined()
      expect((yield* call("find_skill", carol, { query: "refunds" })).body.skills).toEqual([]) // other platform

      const fetched = yield* call("fetch_skill", bob, { id: created.body.id })
      expect(fetched.body.body).toContain("# Refunds")
      expect((yield* call("fetch_skill", carol, { id: created.body.id })).isError).toBe(true)

      expect((yield* call("submit_skill_review", alice, { id: created.body.id, rating: 5 })).body).toBe("You cannot review your own skill")
      expect((yield* call("submit_skill_review", bob, { id: created.body.id, rating: 6 })).isError).toBe(true)
      yield* call("submit_skill_review", bob, { id: created.body.id, rating: 2, text: "meh" })
      const again = yield* call("submit_skill_review", bob, { id: created.body.id, rating: 4, text: "better" })
      expect(again.body).toMatchObject({ rating: 4, review_count: 1 })

      expect((yield* call("delete_skill", bob, { id: created.body.id })).isError).toBe(true)
      expect((yield* call("delete_skill", alice, { id: created.body.id })).body).toEqual({ deleted: true })
      expect((yield* call("fetch_skill", alice, { id: created.body.id })).isError).toBe(true)
    }))
})
