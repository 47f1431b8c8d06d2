"""The top-level API: every public name resolves, and type checkers see the same names."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import rollout_dataset


def test_every_name_in_all_resolves_to_the_object_its_module_defines():
    for name in rollout_dataset.__all__:
        value = getattr(rollout_dataset, name)
        if name != "__version__":
            assert value is getattr(importlib.import_module(rollout_dataset._EXPORTS[name]), name), name


def test_the_type_checking_imports_declare_exactly_the_lazy_exports():
    tree = ast.parse(Path(rollout_dataset.__file__).read_text(encoding="utf-8"))
    guarded = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    static = {alias.name: node.module for node in guarded.body if isinstance(node, ast.ImportFrom)
              for alias in node.names}
    assert static == rollout_dataset._EXPORTS


def test_importing_the_package_imports_no_submodule():
    code = ("import sys, rollout_dataset\n"
            "print(sorted(m for m in sys.modules if m.startswith('rollout_dataset.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_the_errors_and_config_types_are_public():
    for name in ("ConfigError", "ArtifactError", "CaptureConfig", "CaptureResult", "BatchConfig", "BatchResult",
                 "RolloutResult", "capture_rollout", "build", "push", "run_batch"):
        assert name in rollout_dataset.__all__, name


def test_the_environment_seam_and_its_registry_are_public():
    for name in ("Environment", "EnvironmentBase", "get_environment", "register_environment", "available_environments",
                 "run_capture", "CrafterRolloutConfig"):
        assert name in rollout_dataset.__all__, name
    assert rollout_dataset.get_environment("coding").config_class() is rollout_dataset.CaptureConfig
