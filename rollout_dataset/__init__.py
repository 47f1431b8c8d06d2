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


# public name -> module that defines it (kept in step with the TYPE_CHECKING imports below;
# tests/test_public_api.py checks both)
_EXPORTS: dict[str, str] = {
    "CaptureProxy": "rollout_dataset.proxy",
    "read_trace": "rollout_dataset.proxy",
    "create_backend_app": "rollout_dataset.backend",
    "LocalBackend": "rollout_dataset.backend",
    "load_tasks": "rollout_dataset.tasks",
    "capture_rollout": "rollout_dataset.capture",
    "CaptureConfig": "rollout_dataset.recipes.coding",
    "CaptureResult": "rollout_dataset.capture",
    "build_graph": "rollout_dataset.graph",
    "export_rollout": "rollout_dataset.export",
    "turns_document": "rollout_dataset.export",
    "summarise": "rollout_dataset.export",
    "render_samples": "rollout_dataset.render",
    "build": "rollout_dataset.builder.build",  # the defining module: through the package, mypy takes the
    # name `build` for the submodule rollout_dataset.builder.build and reports a redefinition
    "BuildResult": "rollout_dataset.builder.build",
    "push": "rollout_dataset.hub",
    "PushResult": "rollout_dataset.hub",
    "run_batch": "rollout_dataset.batch",
    "BatchConfig": "rollout_dataset.batch",
    "BatchResult": "rollout_dataset.batch",
    "StepRewardConfig": "rollout_dataset.rewards.config",
    "RolloutResult": "rollout_dataset.rewards.results",
    "run_crafter_rollout": "rollout_dataset.recipes.crafter",
    "CrafterRolloutConfig": "rollout_dataset.recipes.crafter",
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
    "SessionApiError": "rollout_dataset.errors",
    "DatasetDirError": "rollout_dataset.errors",
    "TokenizerMismatchError": "rollout_dataset.errors",
    "DistributedBuildError": "rollout_dataset.errors",
    "ToolNotInstalledError": "rollout_dataset.errors",
}

__all__ = ["__version__", *_EXPORTS]

if TYPE_CHECKING:  # static imports for type checkers (`X as X`: an explicit re-export); never executed
    from rollout_dataset.proxy import CaptureProxy as CaptureProxy, read_trace as read_trace
    from rollout_dataset.backend import create_backend_app as create_backend_app, LocalBackend as LocalBackend
    from rollout_dataset.tasks import load_tasks as load_tasks
    from rollout_dataset.capture import capture_rollout as capture_rollout, CaptureResult as CaptureResult
    from rollout_dataset.recipes.coding import CaptureConfig as CaptureConfig
    from rollout_dataset.graph import build_graph as build_graph
    from rollout_dataset.export import export_rollout as export_rollout, turns_document as turns_document, summarise as summarise
    from rollout_dataset.render import render_samples as render_samples
    from rollout_dataset.builder.build import build as build, BuildResult as BuildResult
    from rollout_dataset.hub import push as push, PushResult as PushResult
    from rollout_dataset.batch import run_batch as run_batch, BatchConfig as BatchConfig, BatchResult as BatchResult
    from rollout_dataset.rewards.config import StepRewardConfig as StepRewardConfig
    from rollout_dataset.rewards.results import RolloutResult as RolloutResult
    from rollout_dataset.recipes.crafter import run_crafter_rollout as run_crafter_rollout, CrafterRolloutConfig as CrafterRolloutConfig
    from rollout_dataset.capture import run_capture as run_capture
    from rollout_dataset.envs import (
        Environment as Environment,
        EnvironmentBase as EnvironmentBase,
        get_environment as get_environment,
        register_environment as register_environment,
        available_environments as available_environments,
    )
    from rollout_dataset.schema.check import validate_path as validate_path
    from rollout_dataset.errors import (
        RolloutDatasetError as RolloutDatasetError,
        UpstreamError as UpstreamError,
        UpstreamStatusError as UpstreamStatusError,
        TaskIndexError as TaskIndexError,
        TaskSourceError as TaskSourceError,
        SandboxLimitError as SandboxLimitError,
        SandboxUnavailableError as SandboxUnavailableError,
        SchemaValidationError as SchemaValidationError,
        LeakageError as LeakageError,
        ArtifactError as ArtifactError,
        PublishError as PublishError,
        GuardrailError as GuardrailError,
        ConfigError as ConfigError,
        TraceIntegrityError as TraceIntegrityError,
        SessionApiError as SessionApiError,
        RecordWriteError as RecordWriteError,
        DatasetDirError as DatasetDirError,
        TokenizerMismatchError as TokenizerMismatchError,
        DistributedBuildError as DistributedBuildError,
        ToolNotInstalledError as ToolNotInstalledError,
    )


def __getattr__(name: str) -> Any:
    if name == "__version__":  # `rollout_dataset/_version.py` holds it, read on first use
        from rollout_dataset._version import __version__

        globals()[name] = __version__
        return __version__
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rollout_dataset' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
