// Skills: per-platform markdown playbooks that end users' agents find (full-text), fetch, create,
// delete (their own only) and review (1-5). Exposed as the skills tool family on the per-user
// tool URL when the platform has skills_enabled.
import { PgClient } from "@effect/sql-pg"
import { Effect } from "effect"
import { isUuid } from "../lib/Ids.js"
import type { EndUserPrincipal } from "../access/KeyAuth.js"
import type { ToolResult } from "./apps/ToolApp.js"

export interface Skill {
  readonly id: string
  readonly name: string
  readonly description: string
  readonly body: string
  readonly created_by: string | null
  readonly rating: number | null
  readonly review_count: number
}

interface SkillRow {
  readonly id: string
  readonly name: string
  readonly description: string
  readonly body: string
  readonly created_by: string | null
  readonly rating_sum: number
  readonly review_count: number
}

const toSkill = (row: SkillRow): Skill => ({
  id: row.id,
  name: row.name,
  description: row.description,
  body: row.body,
  created_by: row.created_by,
  rating: row.review_count === 0 ? null : Math.round((row.rating_sum / row.review_count) * 100) / 100,
  review_count: row.review_count
})

const text = (value: unknown): ToolResult => ({ content: [{ type: "text", text: JSON.stringify(value) }] })
const failure = (message: string): ToolResult => ({ content: [{ type: "text", text: message }], isError: true })

const str = (args: Readonly<Record<string, unknown>>, key: string, max: number): string | null => {
  const value = args[key]
  return typeof value === "string" && value.trim() !== "" && value.length <= max && !value.includes("\u0000") ? value : null
}

/** A tool of the skills family, as served over MCP. */
export interface SkillTool {
  readonly name: string
  readonly description: string
  readonly inputSchema: { readonly type: "object"; readonly properties: Readonly<Record<string, unknown>>; readonly required: ReadonlyArray<string> }
  readonly run: (caller: EndUserPrincipal, args: Readonly<Record<string, unknown>>) => Effect.Effect<ToolResult>
}

export class Skills extends Effect.Service<Skills>()("gateway/Skills", {
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient

    const enabled = (platformId: string) =>
      sql<{ skills_enabled: boolean }>`SELECT skills_enabled FROM platforms WHERE id = ${platformId}`.pipe(
        Effect.map((rows) => rows[0]?.skills_enabled === true),
        Effect.orDie
      )

    const find = (caller: EndUserPrincipal, query: string, limit: number) =>
      sql<SkillRow>`SELECT id, name, description, body, created_by, rating_sum, review_count FROM skills
        WHERE platform_id = ${caller.platformId} AND search @@ websearch_to_tsquery('english', ${query})
        ORDER BY ts_rank(search, websearch_to_tsquery('english', ${query})) DESC, review_count DESC, created_at
        LIMIT ${limit}`.pipe(Effect.map((rows) => rows.map(toSkill)), Effect.orDie)

    const fetch = (caller: EndUserPrincipal, id: string) =>
      (isUuid(id)
        ? sql<SkillRow>`SELECT id, name, description, body, created_by, rating_sum, review_count FROM skills
            WHERE id = ${id} AND platform_id = ${caller.platformId}`
        : Effect.succeed([] as ReadonlyArray<SkillRow>)).pipe(Effect.map((rows) => rows[0] === undefined ? null : toSkill(rows[0])), Effect.orDie)

    const create = (caller: EndUserPrincipal, input: { readonly name: string; readonly description: string; readonly body: string }) =>
      sql<SkillRow>`INSERT INTO skills (platform_id, created_by, name, description, body)
        VALUES (${caller.platformId}, ${caller.endUserId}, ${input.name}, ${input.description}, ${input.body})
        RETURNING id, name, description, body, created_by, rating_sum, review_count`.pipe(Effect.map((rows) => toSkill(rows[0]!)), Effect.orDie)

    /** Only the author may delete; anything else looks like "not found". */
    const remove = (caller: EndUserPrincipal, id: string): Effect.Effect<boolean> =>
      isUuid(id)
        ? sql`DELETE FROM skills WHERE id = ${id} AND platform_id = ${caller.platformId} AND created_by = ${caller.endUserId}
            RETURNING id`.pipe(Effect.map((rows) => rows.length === 1), Effect.orDie)
        : Effect.succeed(false)

    /** One review per user and skill (a second one replaces the first); not on one's own skill. */
    const review = (caller: EndUserPrincipal, id: string, rating: number, comment: string) =>
      Effect.gen(function*() {
        const skill = yield* fetch(caller, id)
        if (skill === null) return { ok: false as const, reason: "not_found" as const }
        if (skill.created_by === caller.endUserId) return { ok: false as const, reason: "own_skill" as const }
        const [previous] = yield* sql<{ rating: number }>`SELECT rating FROM skill_reviews
          WHERE skill_id = ${id} AND end_user_id = ${caller.endUserId} FOR UPDATE`
        yield* sql`INSERT INTO skill_reviews (skill_id, end_user_id, rating, text) VALUES (${id}, ${caller.endUserId}, ${rating}, ${comment})
          ON CONFLICT (skill_id, end_user_id) DO UPDATE SET rating = excluded.rating, text = excluded.text, created_at = now()`
        const [row] = yield* sql<SkillRow>`UPDATE skills SET
            rating_sum = rating_sum + ${rating - (previous?.rating ?? 0)},
            review_count = review_count + ${previous === undefined ? 1 : 0}
          WHERE id = ${id} RETURNING id, name, description, body, created_by, rating_sum, review_count`
        return { ok: true as const, skill: toSkill(row!) }
      }).pipe(sql.withTransaction, Effect.orDie)

    const tools: ReadonlyArray<SkillTool> = [
      {
        name: "find_skill",
        description: "Search this platform's skills (playbooks) by keywords; returns the best matches without their bodies.",
        inputSchema: {
          type: "object",
          properties: { query: { type: "string", minLength: 1, maxLength: 500 }, limit: { type: "integer", minimum: 1, maximum: 25 } },
          required: ["query"]
        },
        run: (caller, args) => {
          const query = str(args, "query", 500)
          if (query === null) return Effect.succeed(failure("query is required (1-500 characters)"))
          const limit = typeof args.limit === "number" && Number.isInteger(args.limit) ? Math.min(Math.max(args.limit, 1), 25) : 8
          return Effect.map(find(caller, query, limit), (skills) =>
            text({ skills: skills.map(({ body: _body, ...summary }) => summary) }))
        }
      },
      {
        name: "fetch_skill",
        description: "Read one skill, including its markdown body.",
        inputSchema: { type: "object", properties: { id: { type: "string" } }, required: ["id"] },
        run: (caller, args) =>
          Effect.map(fetch(caller, String(args.id ?? "")), (skill) => skill === null ? failure("No such skill") : text(skill))
      },
      {
        name: "create_skill",
        description: "Share a new skill (a markdown playbook) with this platform's users.",
        inputSchema: {
          type: "object",
          properties: {
            name: { type: "string", minLength: 1, maxLength: 200 },
            description: { type: "string", minLength: 1, maxLength: 2000 },
            body: { type: "string", minLength: 1, maxLength: 100000, description: "Markdown" }
          },
          required: ["name", "description", "body"]
        },
        run: (caller, args) => {
          const name = str(args, "name", 200)
          const description = str(args, "description", 2000)
          const body = str(args, "body", 100_000)
          if (name === null || description === null || body === null) {
            return Effect.succeed(failure("name (1-200), description (1-2000) and body (1-100000 characters) are required"))
          }
          return Effect.map(create(caller, { name, description, body }), text)
        }
      },
      {
        name: "delete_skill",
        description: "Delete a skill you created.",
        inputSchema: { type: "object", properties: { id: { type: "string" } }, required: ["id"] },
        run: (caller, args) =>
          Effect.map(remove(caller, String(args.id ?? "")), (deleted) =>
            deleted ? text({ deleted: true }) : failure("No such skill of yours (only the author can delete a skill)"))
      },
      {
        name: "submit_skill_review",
        description: "Rate a skill from 1 to 5 with a short review; a second review by you replaces the first.",
        inputSchema: {
          type: "object",
          properties: {
            id: { type: "string" },
            rating: { type: "integer", minimum: 1, maximum: 5 },
            text: { type: "string", maxLength: 5000 }
          },
          required: ["id", "rating"]
        },
        run: (caller, args) => {
          const rating = args.rating
          if (typeof rating !== "number" || !Number.isInteger(rating) || rating < 1 || rating > 5) {
            return Effect.succeed(failure("rating must be an integer from 1 to 5"))
          }
          const comment = typeof args.text === "string" ? args.text.slice(0, 5000).replaceAll("\u0000", "") : ""
          return Effect.map(review(caller, String(args.id ?? ""), rating, comment), (result) =>
            result.ok
              ? text(result.skill)
              : failure(result.reason === "own_skill" ? "You cannot review your own skill" : "No such skill"))
        }
      }
    ]

    return { enabled, find, fetch, create, remove, review, tools } as const
  })
}) {}
