// A fast check for the JSON the upstream adapters decode on every answer and stream event: the
// wire schema (an Effect Schema, the source of truth) compiled by ajv from its JSON Schema
// (JSONSchema.make). Schema's decoder interprets the schema for every value; the compiled check
// does not (hot-path rule "linear per-event work", docs/performance.md). Only schemas whose
// JSON Schema says exactly what the Schema accepts are compiled (objects, arrays, unions, literals, strings,
// numbers, booleans, unknown, integers): for those a value the check accepts decodes to itself,
// so it is used as it is (with any properties the schema does not declare, which the adapters
// never read). Everything else, and every value the check refuses, goes through Schema, which
// gives the value or the error (test/unit/wireCheck.test.ts checks the two agree).
import { Ajv } from "ajv"
import { JSONSchema, Option, Schema, SchemaAST } from "effect"

/**
 * The AST nodes whose JSON Schema is exact for JSON values; refinements only Int's (safe
 * integers, bounded below). `undefined` (an optional property's type is `T | undefined`) is in
 * no JSON value, and JSONSchema.make leaves it out.
 */
const exact = (ast: SchemaAST.AST): boolean => {
  switch (ast._tag) {
    case "UndefinedKeyword":
    case "StringKeyword":
    case "NumberKeyword":
    case "BooleanKeyword":
    case "UnknownKeyword":
    case "Literal":
      return true
    case "Refinement":
      return Option.contains(SchemaAST.getSchemaIdAnnotation(ast), Schema.IntSchemaId) && exact(ast.from)
    case "Union":
      return ast.types.every(exact)
    case "TupleType":
      return ast.elements.length === 0 && ast.rest.every((r) => exact(r.type))
    case "TypeLiteral":
      return ast.indexSignatures.length === 0 && ast.propertySignatures.every((p) => typeof p.name === "string" && exact(p.type))
    default:
      return false
  }
}

/**
 * The JSON Schema as ajv should check it: objects open to properties the schema does not declare
 * (Schema ignores them when decoding), integers bounded to the safe range (Schema's Int is
 * Number.isSafeInteger, its JSON Schema only `integer`).
 */
const lenient = (node: unknown): unknown => {
  if (Array.isArray(node)) return node.map(lenient)
  if (typeof node !== "object" || node === null) return node
  const out: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(node)) {
    if (key === "additionalProperties" || key === "$schema") continue
    out[key] = lenient(value)
  }
  if (out.type === "integer") {
    out.minimum = -Number.MAX_SAFE_INTEGER
    out.maximum = Number.MAX_SAFE_INTEGER
  }
  return out
}

const ajv = new Ajv({ strict: false, allErrors: false })

/** A compiled check of `schema`, or undefined when its JSON Schema is not exact (then decode with Schema). */
export const compiledCheck = <A, I>(schema: Schema.Schema<A, I, never>): ((value: unknown) => value is A) | undefined => {
  if (!exact(schema.ast)) return undefined
  const validate = ajv.compile(lenient(JSONSchema.make(schema)) as object)
  return (value: unknown): value is A => validate(value)
}
