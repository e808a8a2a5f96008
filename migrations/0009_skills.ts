// Skills: markdown playbooks a platform's users share through the per-user tool URL, with reviews.
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE skills (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    platform_id uuid NOT NULL REFERENCES platforms(id) ON DELETE CASCADE,
    created_by uuid REFERENCES end_users(id) ON DELETE SET NULL,
    name text NOT NULL,
    description text NOT NULL,
    body text NOT NULL,
    rating_sum integer NOT NULL DEFAULT 0,
    review_count integer NOT NULL DEFAULT 0,
    search tsvector GENERATED ALWAYS AS (
      setweight(to_tsvector('english', name), 'A') || setweight(to_tsvector('english', description), 'B') ||
      setweight(to_tsvector('english', body), 'C')) STORED,
    created_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE INDEX skills_search ON skills USING gin (search)`
  yield* sql`CREATE INDEX skills_platform ON skills (platform_id, created_at)`
  yield* sql`CREATE TABLE skill_reviews (
    skill_id uuid NOT NULL REFERENCES skills(id) ON DELETE CASCADE,
    end_user_id uuid NOT NULL REFERENCES end_users(id) ON DELETE CASCADE,
    rating integer NOT NULL CHECK (rating BETWEEN 1 AND 5),
    text text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (skill_id, end_user_id)
  )`
})
