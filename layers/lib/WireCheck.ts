// A fast check for JSON decoded on every call: the upstream adapters' answers and stream events,
// and the chat request body. The wire schema (an Effect Schema, the source of truth) is compiled
// by ajv from its JSON Schema (JSONSchema.make). Schema's decoder interprets the schema for every
// value; the compiled check does not (hot-path rule "linear per-event work", docs/performance.md).
// Only schemas whose JSON Schema accepts nothing Schema refuses are compiled (objects, records,
// arrays, non-empty arrays, unions, literals, strings, numbers, booleans, unknown, and the
// refinements listed in `exactRefinement`): for those a value the check accepts decodes to
// itself, so it is used as it is. Everything else, and every value the check refuses, goes
// through Schema, which gives the value or the error (test/unit/wireCheck.test.ts checks the two agree).
import { Ajv } from "ajv"
import { Either, JSONSchema, Option, type ParseResult, Schema, SchemaAST } from "effect"

/**
 * Refinements whose JSON Schema keyword accepts nothing their predicate refuses: Int (safe
 * integers, bounded below), number bounds, array sizes, a minimum string length (ajv counts code
 * points, never more than Schema's UTF-16 units) and a pattern without flags (ajv runs it
 * without the `u` flag, as Schema does). Not a maximum string length: there ajv counts fewer.
 */
const exactRefinement = (ast: SchemaAST.Refinement): boolean => {
  const id = Option.getOrUndefined(SchemaAST.getSchemaIdAnnotation(ast))
  switch (id) {
    case Schema.IntSchemaId:
    case Schema.MinLengthSchemaId:
    case Schema.MinItemsSchemaId:
    case Schema.MaxItemsSchemaId:
    case Schema.BetweenSchemaId:
    case Schema.GreaterThanSchemaId:
    case Schema.GreaterThanOrEqualToSchemaId:
    case Schema.LessThanSchemaId:
    case Schema.LessThanOrEqualToSchemaId:
      return true
    case Schema.PatternSchemaId: {
      const regex = (ast.annotations[Schema.PatternSchemaId] as { readonly regex?: RegExp } | undefined)?.regex
      return regex !== undefined && regex.flags === ""
    }
    default:
      return false
  }
}

/**
 * The AST nodes whose JSON Schema is exact for JSON values. `undefined` (an optional property's
 * type is `T | undefined`) is in no JSON value, and JSONSchema.make leaves it out.
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
      return exactRefinement(ast) && exact(ast.from)
    case "Union":
      return ast.types.every(exact)
    case "TupleType": {
      // An array, or a non-empty one (one required element, then the same type).
      const [first, ...more] = ast.elements
      const leading = first === undefined || (more.length === 0 && !first.isOptional && ast.rest.length === 1 && first.type === ast.rest[0]!.type)
      return leading && ast.rest.every((r) => exact(r.type))
    }
    case "TypeLiteral":
      // A struct, or a record of string keys (whose values JSON Schema checks as additionalProperties).
      return ast.indexSignatures.length === 0
        ? ast.propertySignatures.every((p) => typeof p.name === "string" && exact(p.type))
        : ast.propertySignatures.length === 0 &&
          ast.indexSignatures.every((i) => i.parameter._tag === "StringKeyword" && exact(i.type))
    default:
      return false
  }
}

/**
 * What a struct's undeclared properties do to the check. "ignore": they pass, as Schema ignores
 * them (an adapter reads only what it declares). "refuse": they fail it, so a value the check
 * accepts is exactly what Schema would give; Schema decodes the rest and drops them.
 */
export type ExcessProperties = "ignore" | "refuse"

/**
 * The JSON Schema as ajv should check it: integers bounded to the safe range (Schema's Int is
 * Number.isSafeInteger, its JSON Schema only `integer`); with excess "ignore", structs open to
 * properties they do not declare (a record's value schema stays).
 */
const forAjv = (node: unknown, excess: ExcessProperties, names = false): unknown => {
  if (Array.isArray(node)) return node.map((item) => forAjv(item, excess))
  if (typeof node !== "object" || node === null) return node
  const out: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(node)) {
    if (names) {
      // A map of names to schemas (properties, $defs): every name stays.
      out[key] = forAjv(value, excess)
      continue
    }
    // Unknown's `$id` appears once per use, and ajv refuses an id given twice.
    if (key === "$schema" || key === "$id") continue
    if (key === "additionalProperties" && value === false && excess === "ignore") continue
    out[key] = forAjv(value, excess, key === "properties" || key === "$defs" || key === "definitions")
  }
  if (out.type === "integer") {
    out.minimum = -Number.MAX_SAFE_INTEGER
    out.maximum = Number.MAX_SAFE_INTEGER
  }
  return out
}

// unicodeRegExp off: a `pattern` runs as Schema runs its regex, without the `u` flag.
const ajv = new Ajv({ strict: false, allErrors: false, unicodeRegExp: false })

/** A compiled check of `schema`, or undefined when its JSON Schema is not exact (then decode with Schema). */
export const compiledCheck = <A, I>(
  schema: Schema.Schema<A, I, never>,
  excess: ExcessProperties = "ignore"
): ((value: unknown) => value is A) | undefined => {
  if (!exact(schema.ast)) return undefined
  const validate = ajv.compile(forAjv(JSONSchema.make(schema), excess) as object)
  return (value: unknown): value is A => validate(value)
}

/**
 * Decodes a JSON value with `schema`: the compiled check first, when there is one; Schema for
 * whatever it refuses (the value, or the error saying what is wrong).
 */
export const checkedDecoder = <A, I>(schema: Schema.Schema<A, I, never>, excess: ExcessProperties = "ignore") => {
  const check = compiledCheck(schema, excess)
  const decode = Schema.decodeUnknownEither(schema)
  return (value: unknown): Either.Either<A, ParseResult.ParseError> =>
    check !== undefined && check(value) ? Either.right(value) : decode(value)
}
