// The scheduler the gateway's fibers run on: one queue of tasks, drained in a microtask (in a
// timer after 2,048 drains in a row, so I/O callbacks get their turn), which is how Effect's
// default scheduler worked before 3.20. Since 3.20 the default keeps a runner per fiber (in a
// WeakMap, each with its own queue and its own microtask), so that concurrent runs keep their
// AsyncLocalStorage contexts apart. The gateway keeps no context in AsyncLocalStorage (its spans
// are Effect's, and the OpenTelemetry SDK is never registered globally), and the per-fiber
// runners made every fork and every resumption of an async step dearer (hot-path rule "no
// context copies per call", docs/performance.md).
import { Layer, Scheduler } from "effect"

const MAX_MICROTASK_DRAINS = 2048

const runner = new Scheduler.SchedulerRunner((depth, drain) => {
  if (depth >= MAX_MICROTASK_DRAINS) setTimeout(() => drain(0), 0)
  else Promise.resolve(undefined).then(() => drain(depth + 1))
})

export const sharedScheduler: Scheduler.Scheduler = Scheduler.make((task, priority) => runner.scheduleTask(task, priority))

/** Every fiber forked under this layer (the whole program) runs on `sharedScheduler`. */
export const SharedSchedulerLive = Layer.setScheduler(sharedScheduler)
