"""What the pages use, in one namespace (`from app import common as c`).

The code lives in modules by concern; this module only gathers their public names:
  app.labels   words shown to people (choices, components, phases, display names)
  app.data     the catalog, the merged catalog frames, the cached planner calls
  app.state    the workload in session state, the sidebar, the URL, workload dicts
  app.tables   tables with CSV downloads, units and formats, filters, page header
  app.frame    every page runs inside dashboard.py's frame
No formulas here or there: every number comes from `engine.estimate` or `planner.planning`.
"""

from app.data import (  # noqa: F401
                      add_user_entry,
                      article_inference_table,
                      breakdown,
                      budget_plan,
                      catalog,
                      cheapest,
                      configurations,
                      cost_per_fit,
                      display_names,
                      estimate_one,
                      evidence,
                      inference_table,
                      memory_curve,
                      merged_frames,
                      remove_user_entry,
                      serving_evidence,
                      shipped,
                      shipped_ids,
                      subset,
                      tier_checks,
                      validate_user_entry,
                      what_if,
)
from app.frame import ensure_frame  # noqa: F401
from app.labels import (  # noqa: F401
                      APP_NAME,
                      BASE_LABELS,
                      COMPONENT_LABELS,
                      COMPONENT_NAMES,
                      GB,
                      GIB,
                      INFER_PRECISION_LABELS,
                      KV_LABELS,
                      METHOD_LABELS,
                      OFFLOAD_LABELS,
                      OPTIMIZER_LABELS,
                      PHASE_LABELS,
                      SHORT_NAME_RULES,
                      TASK_LABELS,
                      TRAIN_PRECISION_LABELS,
                      ZERO_LABELS,
)
from app.state import (  # noqa: F401
                      DEFAULT_PLANS,
                      FIELDS,
                      PLAN_CHOICES,
                      budget_workloads,
                      Field,
                      csv_settings,
                      describe,
                      guard,
                      infer_workload,
                      plans,
                      problems,
                      require_valid,
                      scenario,
                      sidebar,
                      store,
                      train_workload,
                      unit,
                      workload,
)
from app.tables import chart, fmt_mem, fmt_usd, gpu_filter, lora_refusal_note, mem, wrap_row, page_header, table  # noqa: F401
