// The ordered list of migrations, run at start by the Migrator (a second start is a no-op).
import { Migrator } from "@effect/sql"
import foundation from "./0001_foundation.js"
import ledger from "./0002_ledger.js"
import webhooks from "./0003_webhooks.js"
import inference from "./0004_inference.js"
import responses from "./0005_responses.js"
import display from "./0006_display.js"
import tools from "./0007_tools.js"
import capabilities from "./0008_capabilities.js"
import skills from "./0009_skills.js"
import webhookTraceContext from "./0010_webhook_trace_context.js"
import databaseIdentity from "./0011_database_identity.js"
import settleAtOnce from "./0012_settle_at_once.js"
import webhookFairDispatch from "./0015_webhook_fair_dispatch.js"
import ledgerBackfillOrder from "./0016_ledger_backfill_order.js"
import mcpSessions from "./0017_mcp_sessions.js"
import callRecords from "./0019_call_records.js"
import budgetReservations from "./0020_budget_reservations.js"
import responseIncompleteReason from "./0022_response_incomplete_reason.js"
import modelServes from "./0023_model_serves.js"
import modelAgent from "./0024_model_agent.js"
import messages from "./0025_messages.js"
import usageRollup from "./0026_usage_rollup.js"
import reserveCountsCapabilityHolds from "./0027_reserve_counts_capability_holds.js"
import timeOrderedIds from "./0028_time_ordered_ids.js"
import ledgerSeqNotIndexed from "./0029_ledger_seq_not_indexed.js"

export const migrations = Migrator.fromRecord({
  "0001_foundation": foundation,
  "0002_ledger": ledger,
  "0003_webhooks": webhooks,
  "0004_inference": inference,
  "0005_responses": responses,
  "0006_display": display,
  "0007_tools": tools,
  "0008_capabilities": capabilities,
  "0009_skills": skills,
  "0010_webhook_trace_context": webhookTraceContext,
  "0011_database_identity": databaseIdentity,
  "0012_settle_at_once": settleAtOnce,
  "0015_webhook_fair_dispatch": webhookFairDispatch,
  "0016_ledger_backfill_order": ledgerBackfillOrder,
  "0017_mcp_sessions": mcpSessions,
  "0019_call_records": callRecords,
  "0020_budget_reservations": budgetReservations,
  "0022_response_incomplete_reason": responseIncompleteReason,
  "0023_model_serves": modelServes,
  "0024_model_agent": modelAgent,
  "0025_messages": messages,
  "0026_usage_rollup": usageRollup,
  "0027_reserve_counts_capability_holds": reserveCountsCapabilityHolds,
  "0028_time_ordered_ids": timeOrderedIds,
  "0029_ledger_seq_not_indexed": ledgerSeqNotIndexed
})
