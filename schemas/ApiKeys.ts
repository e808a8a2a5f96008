// API key records (platform and end-user keys) and the bodies that create and change them.
import { Schema } from "effect"
import { DateInput, LimitParam, NullableTimestamp, PageParam, strict, Text, Timestamp } from "./Common.js"

export const KeyName = Text.pipe(Schema.minLength(1), Schema.maxLength(100))
export const Scope = Schema.String.pipe(Schema.pattern(/^[a-z][a-z0-9_.:-]{0,63}$/))
export const Scopes = Schema.Array(Scope).pipe(Schema.maxItems(32)).annotations({
  description: "What the key may do (default [\"inference\"]). inference: chat completions, responses, capabilities " +
    "search and run, and the tool service; tools: the tool service only (tool apps, OAuth connections, MCP). " +
    "Other values are stored and grant nothing."
})

export const ApiKey = Schema.Struct({
  id: Schema.String,
  platform_id: Schema.String,
  end_user_id: Schema.optional(Schema.String),
  key_prefix: Schema.String,
  name: Schema.String,
  scopes: Schema.Array(Schema.String),
  is_active: Schema.Boolean,
  last_used_at: Schema.optional(NullableTimestamp),
  expires_at: NullableTimestamp,
  created_at: Timestamp
})
export type ApiKey = typeof ApiKey.Type

/** The creation response: the record plus the secret, shown this once. */
export const ApiKeyCreated = Schema.Struct({ ...ApiKey.fields, raw_key: Schema.String })
export type ApiKeyCreated = typeof ApiKeyCreated.Type

export const CreateApiKey = Schema.Struct({
  end_user_id: Schema.optional(Schema.String),
  name: Schema.optional(KeyName),
  scopes: Schema.optional(Scopes),
  expires_at: Schema.optional(DateInput)
}).annotations(strict)

export const UpdateApiKey = Schema.Struct({
  name: Schema.optional(KeyName),
  is_active: Schema.optional(Schema.Boolean)
}).annotations(strict)

export const KeyType = Schema.optionalWith(Schema.Literal("platform", "end_user"), { default: () => "platform" as const })
export const KeyTypeParam = Schema.Struct({ type: KeyType })
export const ListApiKeysParams = Schema.Struct({
  type: KeyType,
  end_user_id: Schema.optional(Schema.String.annotations({ description: "Only this end user's keys (with type=end_user)" })),
  page: PageParam,
  limit: LimitParam
})
