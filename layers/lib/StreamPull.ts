// Runs an Effect Stream a batch at a time for the one consumer whose cost matters per call: the
// chat route's SSE writer (hot-path rule "write the upstream's stream from its source",
// docs/performance.md). A stream made from a pulled source (`pulledStream`: an upstream's SSE
// body) is written straight from that source, without a channel executor; any other stream is
// pulled through its channel.
import { Channel, Chunk, Effect, Either, Exit, Scope, Stream } from "effect"

/**
 * A source of batches: `first` already in hand, then `rest` pulled until it gives undefined
 * (none: nothing more), then `end` with the exit, however the stream ended (its finalizer). A
 * failure of `rest` ends the stream, or is turned into elements by `recover`.
 */
export interface PulledSource<A, E> {
  readonly first: Chunk.Chunk<A> | undefined
  readonly rest: Effect.Effect<Chunk.Chunk<A> | undefined, E> | undefined
  readonly end: (exit: Exit.Exit<unknown, E>) => Effect.Effect<unknown>
  readonly recover?: ((error: E) => Stream.Stream<A>) | undefined
}

const Pulled: unique symbol = Symbol.for("gateway/StreamPull/PulledSource")

const sourceOf = <A, E>(stream: Stream.Stream<A, E>): PulledSource<A, E> | undefined =>
  (stream as Stream.Stream<A, E> & { readonly [Pulled]?: PulledSource<A, E> })[Pulled]

/** The source as an ordinary Stream, for every other consumer: built only if one runs it. */
const asStream = <A, E>({ end, first, recover, rest }: PulledSource<A, E>): Stream.Stream<A, E> => {
  const more: Channel.Channel<Chunk.Chunk<A>, unknown, E, unknown, void, unknown> = rest === undefined
    ? Channel.void
    : Channel.unwrap(Effect.map(rest, (batch) => batch === undefined ? Channel.void : Channel.flatMap(Channel.write(batch), () => more)))
  const stream = Stream.fromChannel(first === undefined ? more : Channel.flatMap(Channel.write(first), () => more)).pipe(
    Stream.ensuringWith(end)
  )
  return recover === undefined ? stream : Stream.catchAll(stream, recover)
}

/**
 * A stream read from a pulled source. It is an ordinary Stream to any consumer; `pullEach`
 * writes it from the source itself: a channel executor, its scope and its pulls cost on every
 * stream and every batch far more than the batch's own work.
 */
export const pulledStream = <A, E>(source: PulledSource<A, E>): Stream.Stream<A, E> =>
  Object.assign(Stream.suspend(() => asStream(source)), { [Pulled]: source })

/**
 * `Stream.catchAll` with a recovery of the same elements; a pulled stream stays pulled (its source
 * carries the recovery), so the chat route still writes it without a channel.
 */
export const recoverWith = <A, E>(stream: Stream.Stream<A, E>, recover: (error: E) => Stream.Stream<A>): Stream.Stream<A> => {
  const source = sourceOf(stream)
  // Object.assign, not a spread: a property added after a spread costs V8 a new hidden class (hot-path rule "no hidden class per call")
  return source === undefined ? Stream.catchAll(stream, recover) : pulledStream(Object.assign({}, source, { recover })) as Stream.Stream<A>
}

/**
 * Hands each non-empty batch of `stream` to `write`, which answers undefined to go on at once or
 * an effect to wait for first (a socket's drain). Once the stream has ended, its finalizers have
 * run (the call's settlement among them), before any recovery's elements.
 *
 * Any other stream's channel is pulled in a scope of its own, closed only when the pull fails or
 * is interrupted. Closing it after a normal end did nothing useful and cost on every stream: the
 * pulled channel's finalizer always runs under the runtime captured when the pull began (a diff
 * and two patches of the fiber's FiberRefs) even when nothing is left to finalize. Nothing is
 * left because the channel ends in a continuation (`Channel.asVoid`): the executor runs the
 * finalizers of the stages inside it as the pull reaches the end, instead of keeping the
 * outermost ones for the scope. test/unit/streamPull.test.ts pins that: if an Effect release
 * changed it, the finalizer would be seen unrun at the end.
 */
export const pullEach = <A>(
  stream: Stream.Stream<A>,
  write: (batch: Chunk.Chunk<A>) => Effect.Effect<void> | undefined
): Effect.Effect<void> => {
  const source = sourceOf<A, unknown>(stream)
  if (source !== undefined) return pullSource(source, write)
  return Effect.flatMap(Scope.make(), (scope) =>
    Effect.flatMap(Channel.toPullIn(Channel.asVoid(Stream.toChannel(stream)), scope), (pull) => {
      const loop: Effect.Effect<void> = Effect.flatMap(pull, (next) => {
        if (Either.isLeft(next)) return Effect.void
        const wait = Chunk.isEmpty(next.right) ? undefined : write(next.right)
        return wait === undefined ? loop : Effect.zipRight(wait, loop)
      })
      return loop
    }).pipe(Effect.onError((cause) => Scope.close(scope, Exit.failCause(cause)))))
}

/** A pulled source, written batch by batch: `end` runs with the exit, then a failure's recovery is written too. */
const pullSource = <A, E>(
  { end, first, recover, rest }: PulledSource<A, E>,
  write: (batch: Chunk.Chunk<A>) => Effect.Effect<void> | undefined
): Effect.Effect<void> => {
  const writing = (batch: Chunk.Chunk<A>) => Chunk.isEmpty(batch) ? undefined : write(batch)
  const more: Effect.Effect<void, E> = rest === undefined ? Effect.void : Effect.flatMap(rest, (batch) => {
    if (batch === undefined) return Effect.void
    const wait = writing(batch)
    return wait === undefined ? more : Effect.zipRight(wait, more)
  })
  const written = Effect.onExit(
    Effect.suspend(() => {
      const wait = first === undefined ? undefined : writing(first)
      return wait === undefined ? more : Effect.zipRight(wait, more)
    }),
    end
  )
  // Without a recovery the stream cannot fail (pullEach takes a Stream that does not).
  return recover === undefined ? written as Effect.Effect<void> : Effect.catchAll(written, (error) => pullEach(recover(error), write))
}
