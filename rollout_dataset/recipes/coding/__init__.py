"""The built-in coding environment, a recipe over the `Environment` seam (`rollout_dataset.envs`).

`CodingEnvironment` (`env.py`): a task of a task set (`rollout_dataset.tasks`), a harness
(`rollout_dataset.harness`) in the allow-list sandbox and the verifier (`rollout_dataset.sandbox`).
Everything only coding uses lives here: its configuration (`config.py`: `CaptureConfig`, the
`capture` flags), its CLI flags (`flags.py`), the statement every harness gets (`statement.py`),
the paths masked in the agent's sandbox (`hiding.py`), the held-out leakage scan (`leakage.py`),
the kept work directory (`workdir.py`), the examples as achievements and the trace replay for
stepwise rewards (`replay.py`), and the local backend's `oracle` player (`policy.py`, registered on
import of `env.py`).
"""

from rollout_dataset.recipes.coding.config import CaptureConfig
from rollout_dataset.recipes.coding.hiding import capture_hidden_paths
from rollout_dataset.recipes.coding.leakage import ROLLOUT_LEAK_MIN_CHARS, LeakHit, scan_for_leaks
from rollout_dataset.recipes.coding.statement import SOLUTION_NOTE, harness_statement

__all__ = [
    "CaptureConfig",
    "LeakHit",
    "ROLLOUT_LEAK_MIN_CHARS",
    "SOLUTION_NOTE",
    "capture_hidden_paths",
    "harness_statement",
    "scan_for_leaks",
]
