"""rollout-dataset: capture LLM-agent rollouts token-exact and publish them as a Hugging Face dataset.

The public API is re-exported here lazily, so `import rollout_dataset` stays cheap and a command
only pays for the modules it uses: one rollout of any environment (`capture_rollout(config) ->
CaptureResult`, `CaptureConfig` for coding, `CrafterRolloutConfig`, a plugin's), the environments
(`Environment`, `EnvironmentBase`, `get_environment`, `register_environment`,
`available_environments`; plugins through the entry-point group `rollout_dataset.environments`),
a batch (`run_batch(BatchConfig) -> BatchResult`), the dataset (`build(...) -> BuildResult`,
`push(...) -> PushResult`), their configuration and result types, and every deliberate error
(`rollout_dataset.errors`). Type checkers and IDEs see the same names through the static imports
under `TYPE_CHECKING` (as `huggingface_hub` does); at runtime `__getattr__` imports on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it (kept in step with the TYPE_CHECKING imports below;
# tests/test_public_api.py checks both)
_EXPORTS: dict[str, str] = {
    "CaptureProxy": "rollout_dataset.proxy",
    "read_trace": "rollout_dataset.proxy",
    "create_backend_app": "rollout_dataset.backend",
    "LocalBackend": "rollout_dataset.backend",
    "load_tasks": "rollout_dataset.tasks",
    "capture_rollout": "rollout_dataset.capture",
    "CaptureConfig": "rollout_dataset.capture",
    "CaptureResult": "rollout_dataset.capture",
    "build_graph": "rollout_dataset.graph",
    "export_rollout": "rollout_dataset.export",
    "turns_document": "rollout_dataset.export",
    "summarise": "rollout_dataset.export",
    "render_samples": "rollout_dataset.render",
    "build": "rollout_dataset.builder",
    "BuildResult": "rollout_dataset.builder",
    "push": "rollout_dataset.hub",
    "PushResult": "rollout_dataset.hub",
    "run_batch": "rollout_dataset.batch",
    "BatchConfig": "rollout_dataset.batch",
    "BatchResult": "rollout_dataset.batch",
    "StepRewardConfig": "rollout_dataset.rewards.config",
    "RolloutResult": "rollout_dataset.rewards.results",
    "run_crafter_rollout": "rollout_dataset.envs.crafter",
    "CrafterRolloutConfig": "rollout_dataset.envs.crafter",
    "run_capture": "rollout_dataset.capture",
    "Environment": "rollout_dataset.envs",
    "EnvironmentBase": "rollout_dataset.envs",
    "get_environment": "rollout_dataset.envs",
    "register_environment": "rollout_dataset.envs",
    "available_environments": "rollout_dataset.envs",
    "validate_path": "rollout_dataset.schema.check",
    "RolloutDatasetError": "rollout_dataset.errors",
    "UpstreamError": "rollout_dataset.errors",
    "UpstreamStatusError": "rollout_dataset.errors",
    "TaskIndexError": "rollout_dataset.errors",
    "TaskSourceError": "rollout_dataset.errors",
    "SandboxLimitError": "rollout_dataset.errors",
    "SandboxUnavailableError": "rollout_dataset.errors",
    "SchemaValidationError": "rollout_dataset.errors",
    "LeakageError": "rollout_dataset.errors",
    "ArtifactError": "rollout_dataset.errors",
    "PublishError": "rollout_dataset.errors",
    "GuardrailError": "rollout_dataset.errors",
    "ConfigError": "rollout_dataset.errors",
    "TraceIntegrityError": "rollout_dataset.errors",
    "RecordWriteError": "rollout_dataset.errors",
    "DatasetDirError": "rollout_dataset.errors",
    "TokenizerMismatchError": "rollout_dataset.errors",
    "DistributedBuildError": "rollout_dataset.errors",
}

__all__ = ["__version__", *_EXPORTS]

if TYPE_CHECKING:  # static imports for type checkers; never executed
    from rollout_dataset.proxy import CaptureProxy, read_trace
    from rollout_dataset.backend import create_backend_app, LocalBackend
    from rollout_dataset.tasks import load_tasks
    from rollout_dataset.capture import capture_rollout, CaptureConfig, CaptureResult
    from rollout_dataset.graph import build_graph
    from rollout_dataset.export import export_rollout, turns_document, summarise
    from rollout_dataset.render import render_samples
    from rollout_dataset.builder import build, BuildResult
    from rollout_dataset.hub import push, PushResult
    from rollout_dataset.batch import run_batch, BatchConfig, BatchResult
    from rollout_dataset.rewards.config import StepRewardConfig
    from rollout_dataset.rewards.results import RolloutResult
    from rollout_dataset.envs.crafter import run_crafter_rollout, CrafterRolloutConfig
    from rollout_dataset.capture import run_capture
    from rollout_dataset.envs import (
        Environment,
        EnvironmentBase,
        get_environment,
        register_environment,
        available_environments,
    )
    from rollout_dataset.schema.check import validate_path
    from rollout_dataset.errors import (
        RolloutDatasetError,
        UpstreamError,
        UpstreamStatusError,
        TaskIndexError,
        TaskSourceError,
        SandboxLimitError,
        SandboxUnavailableError,
        SchemaValidationError,
        LeakageError,
        ArtifactError,
        PublishError,
        GuardrailError,
        ConfigError,
        TraceIntegrityError,
        RecordWriteError,
        DatasetDirError,
        TokenizerMismatchError,
        DistributedBuildError,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rollout_dataset' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
