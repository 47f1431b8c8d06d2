"""rollout-dataset: capture LLM-agent rollouts token-exact and publish them as a Hugging Face dataset.

The public API is re-exported here lazily, so `import rollout_dataset` stays cheap and a command
only pays for the modules it uses.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "CaptureProxy": "rollout_dataset.proxy",
    "read_trace": "rollout_dataset.proxy",
    "create_backend_app": "rollout_dataset.backend",
    "LocalBackend": "rollout_dataset.backend",
    "load_tasks": "rollout_dataset.tasks",
    "capture_rollout": "rollout_dataset.capture",
    "build_graph": "rollout_dataset.graph",
    "export_rollout": "rollout_dataset.export",
    "render_samples": "rollout_dataset.render",
    "build": "rollout_dataset.builder",
    "push": "rollout_dataset.publish",
    "run_batch": "rollout_dataset.batch",
    "run_crafter_rollout": "rollout_dataset.envs.crafter",
    "turns_document": "rollout_dataset.export",
    "summarise": "rollout_dataset.export",
    "validate_path": "rollout_dataset.schema.check",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rollout_dataset' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
