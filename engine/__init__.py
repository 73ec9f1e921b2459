"""Pure, vectorized estimation of LLM memory, speed and cost.

`estimate(scenarios, models, gpus)` is the one front door. The command line (`python -m engine`)
lives in planner/cli.py, one layer up; engine/rules.py decides every default of a request.
"""

from engine.estimate import estimate
from engine.params import total_params
from engine.scenarios import DEFAULTS, grid, normalize

__all__ = ["estimate", "grid", "normalize", "total_params", "DEFAULTS"]
