// End user records and the bodies that create and change them.
import { Schema } from "effect"
import { ApiKeyCreated } from "./ApiKeys.js"
import { Budget } from "./Budgets.js"
import { JsonObject, LimitParam, PageParam, strict, Text, Timestamp } from "./Common.js"

export const ExternalId = Text.pipe(Schema.minLength(1), Schema.maxLength(255))
export const DisplayName = Text.pipe(Schema.minLength(1), Schema.maxLength(100))

export const EndUser = Schema.Struct({
  id: Schema.String,
  platform_id: Schema.String,
  external_id: Schema.String,
  display_name: Schema.String,
  metadata: JsonObject,
  is_active: Schema.Boolean,
  created_at: Timestamp,
  updated_at: Timestamp
})
export type EndUser = typeof EndUser.Type

export const EndUserCreated = Schema.Struct({
  ...EndUser.fields,
  api_key: ApiKeyCreated,
  budget: Schema.NullOr(Budget)
})

export const CreateEndUser = Schema.Struct({
  external_id: ExternalId,
  display_name: Schema.optional(DisplayName),
  metadata: Schema.optional(JsonObject)
}).annotations(strict)

export const UpdateEndUser = Schema.Struct({
  display_name: Schema.optional(DisplayName),
  metadata: Schema.optional(JsonObject),
  is_active: Schema.optional(Schema.Boolean)
}).annotations(strict)

export const ListEndUsersParams = Schema.Struct({
  external_id: Schema.optional(Schema.String),
  page: PageParam,
  limit: LimitParam
})
