// Budget periods: where the current daily or monthly period starts. Monthly periods count
// calendar months from an anchor (UTC), clamping the day: Jan 31 -> Feb 28/29 -> Mar 31.
import type { BudgetPeriod } from "../../schemas/Budgets.js"

const DAY_MS = 24 * 60 * 60 * 1000

/** anchor + n calendar months, the day clamped to the target month's length (UTC). */
export const addMonthsClamped = (anchor: Date, n: number): Date => {
  const year = anchor.getUTCFullYear()
  const month = anchor.getUTCMonth() + n
  const lastDay = new Date(Date.UTC(year, month + 1, 0)).getUTCDate()
  return new Date(Date.UTC(
    year,
    month,
    Math.min(anchor.getUTCDate(), lastDay),
    anchor.getUTCHours(),
    anchor.getUTCMinutes(),
    anchor.getUTCSeconds(),
    anchor.getUTCMilliseconds()
  ))
}

/** The latest period boundary at or before `now` (the anchor itself for one_time budgets). */
export const currentPeriodStart = (period: BudgetPeriod, anchor: Date, now: Date): Date => {
  if (period === "one_time" || now.getTime() < anchor.getTime()) return anchor
  if (period === "daily") {
    return new Date(anchor.getTime() + Math.floor((now.getTime() - anchor.getTime()) / DAY_MS) * DAY_MS)
  }
  let n = (now.getUTCFullYear() - anchor.getUTCFullYear()) * 12 + (now.getUTCMonth() - anchor.getUTCMonth())
  while (n > 0 && addMonthsClamped(anchor, n).getTime() > now.getTime()) n--
  return addMonthsClamped(anchor, n)
}

/**
 * The first instant after `periodStart` at which a new period starts (currentPeriodStart moves
 * past it), or null for one_time budgets (never). The one-statement settlement (Settlements)
 * writes a call without a reset only when the call ended before it.
 */
export const nextPeriodStart = (period: BudgetPeriod, anchor: Date, periodStart: Date): Date | null => {
  if (period === "one_time") return null
  const start = Math.max(periodStart.getTime(), anchor.getTime())
  if (period === "daily") return new Date(anchor.getTime() + (Math.floor((start - anchor.getTime()) / DAY_MS) + 1) * DAY_MS)
  let n = (periodStart.getUTCFullYear() - anchor.getUTCFullYear()) * 12 + (periodStart.getUTCMonth() - anchor.getUTCMonth())
  while (n > 0 && addMonthsClamped(anchor, n).getTime() > start) n--
  while (addMonthsClamped(anchor, n).getTime() <= start) n++
  return addMonthsClamped(anchor, n)
}
