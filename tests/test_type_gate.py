"""The type gate's settings (pyproject.toml [tool.mypy]) cover what the project promises to check.

`make lint` runs mypy with these settings; this file checks the settings themselves, so a public
name added in a new module cannot slip out of the strict checks unnoticed.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import rollout_dataset

ROOT = Path(__file__).resolve().parent.parent


def _strict_modules() -> set[str]:
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    strict = [o for o in overrides if o.get("disallow_any_generics") and o.get("warn_return_any")]
    assert len(strict) == 1, "one [[tool.mypy.overrides]] block holds the public API's strict checks"
    return set(strict[0]["module"])


def test_every_module_defining_a_public_name_is_checked_strictly():
    defining = {"rollout_dataset"}
    for name in rollout_dataset.__all__:
        if name != "__version__":
            defining.add(getattr(rollout_dataset, name).__module__)
    missing = defining - _strict_modules()
    assert not missing, f"add to the strict mypy override in pyproject.toml: {sorted(missing)}"


def test_the_strict_list_names_only_modules_that_exist():
    for module in _strict_modules():
        path = ROOT / Path(*module.split("."))
        assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), module
