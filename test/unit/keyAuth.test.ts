// KeyAuth and the access rules as Effect units: real services on a fresh database, the admin
// key swapped for a stub layer, and time moved with TestClock (key expiry).
import { expect, it, layer } from "@effect/vitest"
import { Effect, Either, Layer, Redacted, TestClock } from "effect"
import { AdminKey } from "../../layers/access/AdminKey.js"
import { ApiKeys } from "../../layers/tenancy/ApiKeys.js"
import { DatabaseLive } from "../../layers/platform/Database.js"
import { CurrentPrincipal, KeyAuth } from "../../layers/access/KeyAuth.js"
import { Platforms } from "../../layers/tenancy/Platforms.js"
import { requireAdmin, requirePlatform } from "../../src/http/Access.js"
import { TestDatabaseUrlLive } from "../support/TestDatabase.js"

const adminKey = "sk-admin_" + "u".repeat(40)
const AdminKeyStub = Layer.succeed(AdminKey, { key: Redacted.make(adminKey), unprinted: false, printed: Effect.void })

const TestLayer = Platforms.DefaultWithoutDependencies.pipe(
  Layer.provideMerge(ApiKeys.DefaultWithoutDependencies),
  Layer.provideMerge(KeyAuth.DefaultWithoutDependencies),
  Layer.provideMerge(AdminKeyStub),
  Layer.provideMerge(DatabaseLive),
  Layer.provide(TestDatabaseUrlLive)
)

layer(TestLayer, { timeout: "60 seconds" })("KeyAuth", (it) => {
  it.effect("an expiring key works until expires_at, then fails with api_key_expired", () =>
    Effect.gen(function*() {
      const platforms = yield* Platforms
      const apiKeys = yield* ApiKeys
      const keyAuth = yield* KeyAuth
      const { platform } = yield* platforms.create({ name: "unit" })
      const key = yield* apiKeys.create(platform.id, { expiresAt: new Date(60_000) }) // TestClock starts at 0

      const before = yield* keyAuth.authenticate(`Bearer ${key.raw_key}`)
      expect(before).toMatchObject({ _tag: "PlatformKey", platformId: platform.id, keyId: key.id })

      yield* TestClock.adjust("59 seconds")
      expect((yield* keyAuth.authenticate(`Bearer ${key.raw_key}`))._tag).toBe("PlatformKey")

      yield* TestClock.adjust("2 seconds")
      const after = yield* Effect.either(keyAuth.authenticate(`Bearer ${key.raw_key}`))
      expect(Either.isLeft(after) && after.left._tag === "Unauthorized" && after.left.code).toBe("api_key_expired")
    }))

  it.effect("the operator key is the stub's; other admin-looking keys are refused", () =>
    Effect.gen(function*() {
      const keyAuth = yield* KeyAuth
      expect((yield* keyAuth.authenticate(`Bearer ${adminKey}`))._tag).toBe("Admin")
      const other = yield* Effect.either(keyAuth.authenticate(`Bearer sk-admin_${"v".repeat(40)}`))
      expect(Either.isLeft(other)).toBe(true)
    }))
})

it.effect("requirePlatform: own platform passes, another is NotFound, end-user and admin keys Forbidden", () =>
  Effect.gen(function*() {
    const own = { _tag: "PlatformKey", keyId: "k", platformId: "p1", scopes: ["inference"] } as const
    const ok = yield* requirePlatform("p1").pipe(Effect.provideService(CurrentPrincipal, own))
    expect(ok.platformId).toBe("p1")
    const other = yield* Effect.flip(requirePlatform("p2").pipe(Effect.provideService(CurrentPrincipal, own)))
    expect(other._tag).toBe("NotFound")
    const endUser = { _tag: "EndUserKey", keyId: "k", platformId: "p1", endUserId: "e", scopes: [] } as const
    const eu = yield* Effect.flip(requirePlatform("p1").pipe(Effect.provideService(CurrentPrincipal, endUser)))
    expect(eu).toMatchObject({ _tag: "Forbidden", code: "forbidden" })
    const admin = yield* Effect.flip(requirePlatform("p1").pipe(Effect.provideService(CurrentPrincipal, { _tag: "Admin" })))
    expect(admin._tag).toBe("Forbidden")
    const notAdmin = yield* Effect.flip(requireAdmin.pipe(Effect.provideService(CurrentPrincipal, own)))
    expect(notAdmin._tag).toBe("Forbidden")
  }))

const listed = { _tag: "PlatformKey", keyId: "k", platformId: "p1", scopes: ["inference"] } as const
it.effect("KeyAuth.test: a listed token is its principal; no key is missing_api_key, any other invalid_api_key", () =>
  Effect.gen(function*() {
    const keyAuth = yield* KeyAuth
    expect(yield* keyAuth.authenticate("Bearer sk-listed")).toBe(listed)
    expect(yield* Effect.flip(keyAuth.authenticate(undefined))).toMatchObject({ code: "missing_api_key" })
    expect(yield* Effect.flip(keyAuth.authenticate("Bearer sk-other"))).toMatchObject({ code: "invalid_api_key" })
    expect(yield* Effect.flip(keyAuth.authenticate("Bearer constructor"))).toMatchObject({ code: "invalid_api_key" })
  }).pipe(Effect.provide(KeyAuth.test({ "sk-listed": listed }))))
