"""The import rules between layers (docs/architecture.md, "Layers"), checked on the source.

Every module of `rollout_dataset` is parsed with `ast`; every import counts, at any depth (a
function-level import is as much a dependency as a top-level one). Each rule names a set of
importing modules and the packages they must not import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "rollout_dataset"

# (name, which files the rule applies to (paths relative to rollout_dataset/), forbidden packages)
RULES = [
    pytest.param(
        "the backend knows no environment, task set or harness",
        ("backend/",),
        ("rollout_dataset.envs", "rollout_dataset.tasks", "rollout_dataset.harness"),
        id="backend",
    ),
    pytest.param(
        "the trainer-facing layers do not depend on the fake server",
        ("export/", "builder/", "graph.py", "render.py"),
        ("rollout_dataset.backend",),
        id="trainer-facing",
    ),
    pytest.param(
        "the server runner knows no server: it imports neither the proxy nor the backend",
        ("serving.py",),
        ("rollout_dataset.proxy", "rollout_dataset.backend", "rollout_dataset.capture"),
        id="serving",
    ),
    pytest.param(
        "environments do not import the batch evaluator, nor the command line",
        ("envs/",),
        ("rollout_dataset.batch", "rollout_dataset.cli"),
        id="envs",
    ),
    pytest.param(
        "the environment seam and the registry know no concrete environment and no pipeline",
        ("envs/base.py", "envs/registry.py", "envs/__init__.py"),
        ("rollout_dataset.envs.coding", "rollout_dataset.envs.crafter", "rollout_dataset.capture",
         "rollout_dataset.batch", "rollout_dataset.tasks", "rollout_dataset.harness", "rollout_dataset.sandbox"),
        id="seam",
    ),
    pytest.param(
        "the capture pipeline and the batch runner get environments from the registry, never by import",
        ("capture/pipeline.py", "capture/upstream.py", "documents.py", "batch/envs.py", "batch/runner.py"),
        ("rollout_dataset.envs.coding", "rollout_dataset.envs.crafter", "rollout_dataset.tasks",
         "rollout_dataset.harness", "rollout_dataset.sandbox"),
        id="pipeline",
    ),
    pytest.param(
        "the coding environment does not import Crafter",
        ("envs/coding/",),
        ("rollout_dataset.envs.crafter",),
        id="coding-env",
    ),
    pytest.param(
        "Crafter does not import the coding environment",
        ("envs/crafter/",),
        ("rollout_dataset.envs.coding",),
        id="crafter-env",
    ),
    pytest.param(
        "Hub I/O publishes what the builder wrote: it knows no server, capture pipeline, environment, batch or CLI",
        ("hub/",),
        ("rollout_dataset.proxy", "rollout_dataset.backend", "rollout_dataset.capture", "rollout_dataset.envs",
         "rollout_dataset.batch", "rollout_dataset.cli"),
        id="hub",
    ),
    pytest.param(
        "the builder writes local folders only: it does not import the Hub I/O package",
        ("builder/",),
        ("rollout_dataset.hub",),
        id="builder-no-hub",
    ),
]


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve_relative(module: str | None, level: int, importer: Path, root: Path) -> str:
    package = _module_name(importer, root).split(".")
    if importer.name != "__init__.py":
        package.pop()
    if level > 1:
        package = package[: len(package) - (level - 1)]
    return ".".join(package + ([module] if module else []))


def imports_of(path: Path, root: Path = PACKAGE_DIR) -> list[tuple[int, str]]:
    """Every module a file imports, at any depth, as `(line, absolute dotted name)`.

    `from X import Y` counts as importing both `X` and `X.Y` (Y may be a submodule).
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = _resolve_relative(node.module, node.level, path, root)
            found.append((node.lineno, base))
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names if alias.name != "*")
    return found


def _matches(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def violations(scopes: tuple[str, ...], forbidden: tuple[str, ...], root: Path = PACKAGE_DIR) -> list[str]:
    """Lines `file:line imports module` breaking one rule, for the package folder `root`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if not any(relative == s or (s.endswith("/") and relative.startswith(s)) for s in scopes):
            continue
        seen = set()
        for line, name in imports_of(path, root):
            for package in forbidden:
                if _matches(name, package) and (line, package) not in seen:
                    seen.add((line, package))
                    found.append(f"rollout_dataset/{relative}:{line} imports {name}")
    return found


@pytest.mark.parametrize("rule,scopes,forbidden", RULES)
def test_layer_imports_only_downward(rule, scopes, forbidden):
    broken = violations(scopes, forbidden)
    assert not broken, f"{rule}:\n" + "\n".join(broken)


def test_rule_checker_sees_function_level_and_relative_imports(tmp_path):
    package = tmp_path / "rollout_dataset"
    (package / "backend").mkdir(parents=True)
    (package / "backend" / "__init__.py").write_text("")
    (package / "backend" / "x.py").write_text(
        "def f():\n    from ..envs.crafter import observation\n    import rollout_dataset.tasks\n"
    )
    broken = violations(("backend/",), ("rollout_dataset.envs", "rollout_dataset.tasks"), root=package)
    assert broken == [
        "rollout_dataset/backend/x.py:2 imports rollout_dataset.envs.crafter",
        "rollout_dataset/backend/x.py:3 imports rollout_dataset.tasks",
    ]
