// Spend, calls and errors per day as a uPlot chart. The curve is drawn from floats (pixels need no
// exactness); the legend shows each day's exact amount from the API.
import { useEffect, useRef } from "preact/hooks"
import uPlot from "uplot"
import { formatUsd } from "./money"
import type { UsageBucket } from "./types"

const HEIGHT = 260

export const DailyChart = ({ buckets }: { buckets: ReadonlyArray<UsageBucket> }) => {
  const container = useRef<HTMLDivElement>(null)
  useEffect(() => {
    const element = container.current
    if (element === null) return
    const xs = buckets.map((bucket) => Date.parse(bucket.key) / 1000)
    const spend = buckets.map((bucket) => Number(bucket.cost_usd))
    const calls = buckets.map((bucket) => bucket.calls)
    const errors = buckets.map((bucket) => bucket.errors)
    const plot = new uPlot({
      width: Math.max(320, element.clientWidth),
      height: HEIGHT,
      tzDate: (seconds) => uPlot.tzDate(new Date(seconds * 1000), "Etc/UTC"),
      // From zero, up to the highest day (fractions of a cent stay visible).
      scales: {
        x: { time: true },
        usd: { range: (_, __, max) => [0, max > 0 ? max * 1.1 : 1] },
        calls: { range: (_, __, max) => [0, Math.max(max, 1) * 1.1] }
      },
      series: [
        { value: (_, seconds) => seconds == null ? "—" : new Date(seconds * 1000).toISOString().slice(0, 10) },
        {
          label: "Spend",
          scale: "usd",
          stroke: "#2563eb",
          width: 2,
          fill: "rgba(37, 99, 235, 0.08)",
          value: (_, __, ___, index) => index == null ? "—" : formatUsd(buckets[index]?.cost_usd)
        },
        { label: "Calls", scale: "calls", stroke: "#16a34a", width: 2, value: (_, value) => value == null ? "—" : String(value) },
        { label: "Errors", scale: "calls", stroke: "#cf222e", width: 1, dash: [4, 4], value: (_, value) => value == null ? "—" : String(value) }
      ],
      axes: [
        {},
        {
          scale: "usd",
          values: (_, ticks) => ticks.map((tick) => formatUsd(String(tick))),
          // Wide enough for the longest label (small spends have many decimals).
          size: (_, values) => 24 + 7 * Math.max(6, ...(values ?? []).map((v) => String(v).length))
        },
        { scale: "calls", side: 1, grid: { show: false } }
      ]
    }, [xs, spend, calls, errors], element)
    const resize = new ResizeObserver(() => plot.setSize({ width: Math.max(320, element.clientWidth), height: HEIGHT }))
    resize.observe(element)
    return () => {
      resize.disconnect()
      plot.destroy()
    }
  }, [buckets])
  return <div ref={container} class="chart" data-testid="daily-chart" />
}
