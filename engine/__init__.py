"""Pure, vectorized estimation of LLM memory, speed and cost.

`estimate(scenarios, models, gpus)` is the one front door; `python -m engine` is the CLI.
"""

from engine.estimate import estimate
from engine.params import total_params
from engine.scenarios import DEFAULTS, grid, normalize, product

__all__ = ["estimate", "grid", "normalize", "product", "total_params", "DEFAULTS"]
