// The building block of the services' test layers: a service value holding only the members a
// test gives. Any other member throws when called, naming itself, so a test never runs on a
// silent default and a stub says at once which member a change started to need.
export const stubService = <T extends object>(name: string, members: Partial<T>): T =>
  new Proxy(members as T, {
    get: (target, key) =>
      // Symbols and `then` stay absent: the value must not look like a promise or an iterable.
      typeof key === "symbol" || key === "then" || key in target
        ? Reflect.get(target, key)
        : () => {
          throw new Error(`${name}.${key} is not stubbed in this test`)
        }
  })
