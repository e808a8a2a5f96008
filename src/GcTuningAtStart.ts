// Imported first by main.ts, so that the V8 settings of GcTuning.ts apply before the rest of the
// program is loaded (ES modules are evaluated in import order).
import { applyGcTuning } from "./GcTuning.js"

applyGcTuning()
