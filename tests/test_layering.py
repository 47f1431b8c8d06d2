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
        ("rollout_dataset.envs", "rollout_dataset.recipes", "rollout_dataset.tasks", "rollout_dataset.harness"),
        id="backend",
    ),
    pytest.param(
        "the trainer-facing layers depend on no server",
        ("export/", "builder/", "graph.py", "render.py", "session_client.py"),
        ("rollout_dataset.backend", "rollout_dataset.proxy", "rollout_dataset.server_runner"),
        id="trainer-facing",
    ),
    pytest.param(
        "ATIF in and out is trainer-facing and pure: no server, no HTTP client, no capture",
        ("atif/",),
        ("rollout_dataset.backend", "rollout_dataset.proxy", "rollout_dataset.server_runner", "rollout_dataset.capture",
         "rollout_dataset.batch", "rollout_dataset.cli", "httpx"),
        id="atif",
    ),
    pytest.param(
        "the server runner knows no server: it imports neither the proxy nor the backend",
        ("server_runner.py",),
        ("rollout_dataset.proxy", "rollout_dataset.backend", "rollout_dataset.capture"),
        id="server-runner",
    ),
    pytest.param(
        "the environments do not import the batch evaluator, nor the command line",
        ("recipes/",),
        ("rollout_dataset.batch", "rollout_dataset.cli"),
        id="recipes",
    ),
    pytest.param(
        "the environment seam and the registry know no concrete environment and no pipeline",
        ("envs/",),
        ("rollout_dataset.recipes", "rollout_dataset.capture", "rollout_dataset.batch", "rollout_dataset.tasks",
         "rollout_dataset.harness", "rollout_dataset.sandbox", "rollout_dataset.documents", "rollout_dataset.cli"),
        id="seam",
    ),
    pytest.param(
        "the capture pipeline and the batch runner get environments from the registry, never by import",
        ("capture/", "documents.py", "batch/"),
        ("rollout_dataset.recipes", "rollout_dataset.tasks", "rollout_dataset.harness", "rollout_dataset.sandbox"),
        id="pipeline",
    ),
    pytest.param(
        "the documents are pure: no server, no HTTP client, no capture",
        ("documents.py",),
        ("rollout_dataset.capture", "rollout_dataset.proxy", "rollout_dataset.backend", "httpx"),
        id="documents",
    ),
    pytest.param(
        "nothing below the command line imports a concrete environment (the registry names them)",
        ("backend/", "batch/", "builder/", "capture/", "envs/", "export/", "harness/", "proxy/", "rewards/",
         "sandbox/", "schema/", "tasks/", "documents.py", "atif/", "graph.py", "render.py", "errors.py", "files.py", "processes.py",
         "tokenizers.py", "harmony.py", "trace_integrity.py", "server_runner.py", "wire/", "package_paths.py", "npm_tools.py", "artifact_files.py", "hub/", "audit/", "viewer/",
         "_version.py"),
        ("rollout_dataset.recipes",),
        id="recipes-at-the-edge",
    ),
    pytest.param(
        "the coding environment does not import Crafter",
        ("recipes/coding/",),
        ("rollout_dataset.recipes.crafter",),
        id="coding-env",
    ),
    pytest.param(
        "Crafter does not import the coding environment",
        ("recipes/crafter/",),
        ("rollout_dataset.recipes.coding",),
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
    pytest.param(
        "the builder keeps an audit through `builder.audit_card` without importing the audit package",
        ("builder/",),
        ("rollout_dataset.audit",),
        id="builder-no-audit",
    ),
    pytest.param(
        "the version and the package paths are leaves: nothing imports the package root for them",
        ("",),
        ("rollout_dataset.__version__",),
        id="version",
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


def _in_scope(relative: str, scopes: tuple[str, ...]) -> bool:
    """`relative` (a path under the package folder) is one of `scopes`: a file, a folder ending in `/`,
    or `""` for every file."""
    return any(s == "" or relative == s or (s.endswith("/") and relative.startswith(s)) for s in scopes)


def violations(scopes: tuple[str, ...], forbidden: tuple[str, ...], root: Path = PACKAGE_DIR) -> list[str]:
    """Lines `file:line imports module` breaking one rule, for the package folder `root`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if not _in_scope(relative, scopes):
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


# --- the import graph: cycles and indirect imports ----------------------------------------------
#
# Nodes are the modules of the package (`rollout_dataset.x.y`, a package is its `__init__`). An
# edge A -> B is an import in A that runs B: `import B`, `from B import name`, or `from P import B`
# when `P.B` is a module. Imports under `if TYPE_CHECKING:` never run and are left out. "Faces":
# importing `rollout_dataset.p.q` also runs `p/__init__.py` unless the importer is inside `p`
# (Python has then begun running it already), so with faces an edge also goes to each such package.


def _type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def module_files(root: Path = PACKAGE_DIR) -> dict[str, Path]:
    """Every module of the package folder `root`, by dotted name."""
    return {_module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def runtime_imports(path: Path, modules: dict[str, Path], root: Path = PACKAGE_DIR) -> list[tuple[int, str]]:
    """The package modules a file's imports run (any depth, none under `TYPE_CHECKING`), as `(line, module)`."""
    found: list[tuple[int, str]] = []

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking_block(child):
                for other in child.orelse:
                    visit_one(other)
            else:
                visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.extend((node.lineno, target) for alias in node.names if (target := resolve(alias.name)))
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_relative(node.module, node.level, path, root) if node.level else node.module or ""
            for alias in node.names:
                target = resolve(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
                if target:
                    found.append((node.lineno, target))
        visit(node)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return found


#: the package's own graphs, read once per run (its files do not change while the tests run)
_PACKAGE_GRAPHS: dict[bool, dict[str, dict[str, str]]] = {}


def import_graph(root: Path = PACKAGE_DIR, faces: bool = False) -> dict[str, dict[str, str]]:
    """`{importer: {imported: "path:line" of the first import that runs it}}` for the package at `root`.

    The package's own graph is parsed once and handed out as a copy; a planted package's every time."""
    if root != PACKAGE_DIR:
        return _read_import_graph(root, faces)
    if faces not in _PACKAGE_GRAPHS:
        _PACKAGE_GRAPHS[faces] = _read_import_graph(root, faces)
    return {name: dict(targets) for name, targets in _PACKAGE_GRAPHS[faces].items()}


def _read_import_graph(root: Path, faces: bool) -> dict[str, dict[str, str]]:
    modules = module_files(root)
    graph: dict[str, dict[str, str]] = {name: {} for name in modules}
    for name, path in modules.items():
        parts = name.split(".")
        running = {".".join(parts[:i]) for i in range(1, len(parts) + (path.name == "__init__.py"))}
        where = path.relative_to(root.parent).as_posix()
        for line, target in runtime_imports(path, modules, root):
            targets = [target]
            if faces:
                pieces = target.split(".")
                targets += [p for i in range(1, len(pieces)) if (p := ".".join(pieces[:i])) in modules
                            and p not in running]
            for other in targets:
                if other != name:
                    graph[name].setdefault(other, f"{where}:{line}")
    return graph


def folder_graph(root: Path = PACKAGE_DIR) -> dict[str, dict[str, str]]:
    """The module graph folded onto the package's top-level folders and modules (`capture`, `graph`, ...)."""
    folded: dict[str, dict[str, str]] = {}
    for importer, targets in import_graph(root).items():
        top = importer.split(".")[1] if "." in importer else None
        if top is None:
            continue
        folded.setdefault(top, {})
        for target, where in targets.items():
            other = target.split(".")[1] if "." in target else None
            if other and other != top:
                folded[top].setdefault(other, f"{where} imports {target}")
    return folded


def strongly_connected(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """The groups of two or more nodes that reach each other (Tarjan), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:  # iterative, so a deep graph cannot hit the recursion limit
        work = [(node, iter(sorted(graph.get(node, {}))))]
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        while work:
            current, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                elif child in on_stack:
                    low[current] = min(low[current], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[current])
            if low[current] == index[current]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == current:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(groups)


def _shortest_cycle(graph: dict[str, dict[str, str]], start: str, within: set[str]) -> list[str]:
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph.get(node, {})):
            if child == start:
                return paths[node] + [start]
            if child in within and child not in paths:
                paths[child] = paths[node] + [child]
                queue.append(child)
    return [start]


def cycles(graph: dict[str, dict[str, str]]) -> list[str]:
    """One line per group of mutually importing nodes: its shortest cycle, each step with where it is imported."""
    report = []
    for group in strongly_connected(graph):
        path = _shortest_cycle(graph, group[0], set(group))
        steps = " -> ".join(f"{a} ({graph[a][b]})" for a, b in zip(path, path[1:])) + f" -> {path[0]}"
        others = f" [group of {len(group)}: {', '.join(group)}]" if len(group) > len(path) - 1 else ""
        report.append(steps + others)
    return report


def test_no_import_cycle_among_modules():
    found = cycles(import_graph())
    assert not found, "import cycles between modules:\n" + "\n".join(found)


def test_no_import_cycle_through_package_faces():
    found = cycles(import_graph(faces=True))
    assert not found, "import cycles counting the package __init__ each import runs:\n" + "\n".join(found)


def test_no_import_cycle_among_top_level_folders():
    found = cycles(folder_graph())
    assert not found, "import cycles between the package's top-level folders and modules:\n" + "\n".join(found)


def indirect_violations(scopes: tuple[str, ...], forbidden: tuple[str, ...], root: Path = PACKAGE_DIR) -> list[str]:
    """Chains of imports (faces included) from a module in `scopes` to a forbidden package: the shortest one
    per module and forbidden package, each step as `file:line imports module`."""
    graph = import_graph(root, faces=True)
    modules = module_files(root)
    found = []
    for name, path in modules.items():
        if not _in_scope(path.relative_to(root).as_posix(), scopes):
            continue
        came_from: dict[str, str | None] = {name: None}
        reached: set[str] = set()
        queue = [name]
        while queue:
            node = queue.pop(0)
            for child in sorted(graph[node]):
                if child in came_from:
                    continue
                came_from[child] = node
                hit = next((package for package in forbidden if _matches(child, package)), None)
                if hit in reached:
                    continue
                if hit:
                    reached.add(hit)
                    chain, step = [], child
                    while came_from[step] is not None:
                        chain.append(f"{graph[came_from[step]][step]} imports {step}")
                        step = came_from[step]
                    found.append(" -> ".join(reversed(chain)))
                else:
                    queue.append(child)
    return found


#: the rules whose forbidden names are modules of the package (an import chain can reach them).
MODULE_RULES = [rule for rule in RULES if rule.id != "version"]


@pytest.mark.parametrize("rule,scopes,forbidden", RULES)
def test_every_rule_names_files_and_folders_that_exist(rule, scopes, forbidden):
    missing = [s for s in scopes if s and not (PACKAGE_DIR / s).exists()]
    assert not missing, f"{rule}: no such file or folder under rollout_dataset/: {missing}"


@pytest.mark.parametrize("rule,scopes,forbidden", MODULE_RULES)
def test_layer_rule_holds_through_indirect_imports(rule, scopes, forbidden):
    broken = indirect_violations(scopes, forbidden)
    assert not broken, f"{rule} (through indirect imports):\n" + "\n".join(broken)


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    package = tmp_path / "rollout_dataset"
    for relative, text in files.items():
        target = package / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return package


def test_cycle_checkers_each_catch_a_planted_cycle(tmp_path):
    package = _plant(tmp_path, {
        "__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rollout_dataset.b import x\n",
        "a.py": "def f():\n    from rollout_dataset import b\n",
        "b.py": "from . import a\n",
        "p/__init__.py": "from rollout_dataset.p.inner import thing\n",
        "p/inner.py": "from rollout_dataset.q.leaf import value\nthing = 1\n",
        "q/__init__.py": "",
        "q/leaf.py": "import rollout_dataset.p.other\nvalue = 1\n",
        "p/other.py": "",
    })
    assert cycles(import_graph(package)) == [
        "rollout_dataset.a (rollout_dataset/a.py:2) -> rollout_dataset.b (rollout_dataset/b.py:1) -> rollout_dataset.a"
    ]
    assert cycles(import_graph(package, faces=True)) == [
        "rollout_dataset.a (rollout_dataset/a.py:2) -> rollout_dataset.b (rollout_dataset/b.py:1) -> rollout_dataset.a",
        "rollout_dataset.p (rollout_dataset/p/__init__.py:1) -> rollout_dataset.p.inner (rollout_dataset/p/inner.py:1) "
        "-> rollout_dataset.q.leaf (rollout_dataset/q/leaf.py:1) -> rollout_dataset.p",
    ]
    assert cycles(folder_graph(package)) == [
        "a (rollout_dataset/a.py:2 imports rollout_dataset.b) -> b (rollout_dataset/b.py:1 imports rollout_dataset.a) -> a",
        "p (rollout_dataset/p/inner.py:1 imports rollout_dataset.q.leaf) "
        "-> q (rollout_dataset/q/leaf.py:1 imports rollout_dataset.p.other) -> p",
    ]


def test_indirect_rule_checker_follows_a_chain_of_imports(tmp_path):
    package = _plant(tmp_path, {
        "__init__.py": "",
        "backend/__init__.py": "",
        "backend/x.py": "from rollout_dataset.middle import helper\n",
        "middle.py": "def helper():\n    from rollout_dataset.envs.crafter import observation\n",
        "envs/__init__.py": "",
        "envs/crafter/__init__.py": "",
        "envs/crafter/observation.py": "",
    })
    assert violations(("backend/",), ("rollout_dataset.envs",), root=package) == []
    assert indirect_violations(("backend/",), ("rollout_dataset.envs",), root=package) == [
        "rollout_dataset/backend/x.py:1 imports rollout_dataset.middle -> rollout_dataset/middle.py:2 imports "
        "rollout_dataset.envs"
    ]


if __name__ == "__main__":  # python tests/test_layering.py: print the cycles and indirect breaches of today
    for title, found in (("modules", cycles(import_graph())), ("faces", cycles(import_graph(faces=True))),
                         ("folders", cycles(folder_graph()))):
        print(f"{title}: {len(found)} cycle(s)")
        for line in found:
            print("  " + line)
    for param in RULES:
        rule, scopes, forbidden = param.values
        for line in indirect_violations(scopes, forbidden):
            print(f"[{param.id}] {line}")


# --- docs/architecture.md, "Layers": the picture is the code's -----------------------------------

ARCHITECTURE = PACKAGE_DIR.parent / "docs" / "architecture.md"


def documented_layers(text: str | None = None) -> list[list[str]]:
    """The layers of the picture in docs/architecture.md ("## Layers"), lowest first: each line's names
    (`recipes/coding` as written), before its parenthesised note."""
    text = ARCHITECTURE.read_text(encoding="utf-8") if text is None else text
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    layers = []
    for line in section.splitlines():
        if line.startswith("    ") and line.strip():
            names = line.strip().split("  ", 1)[0].replace("(the seam)", "")
            layers.append([n.strip() for n in names.split(",") if n.strip()])
    return layers


def _top_level_names(root: Path = PACKAGE_DIR) -> set[str]:
    return {p.stem if p.is_file() else p.name for p in root.iterdir()
            if (p.suffix == ".py" and p.name != "__init__.py") or (p.is_dir() and (p / "__init__.py").exists())}


def test_every_package_the_architecture_names_exists_and_every_top_level_one_is_named():
    named = [name for layer in documented_layers() for name in layer]
    missing = [name for name in named if not ((PACKAGE_DIR / name).is_dir() or (PACKAGE_DIR / f"{name}.py").is_file())]
    assert not missing, f"docs/architecture.md names what rollout_dataset/ does not have: {missing}"
    unnamed = sorted(_top_level_names() - {name.split("/")[0] for name in named})
    assert not unnamed, f"docs/architecture.md's Layers picture does not name: {unnamed}"


def test_every_import_between_top_level_folders_goes_down_the_documented_layers():
    rank = {name.split("/")[0]: i for i, layer in enumerate(documented_layers()) for name in layer}
    upward = [f"{a} (layer {rank[a]}) -> {b} (layer {rank[b]}): {where}"
              for a, targets in sorted(folder_graph().items()) for b, where in sorted(targets.items())
              if a in rank and b in rank and rank[b] > rank[a]]
    assert not upward, "imports that run up the layers of docs/architecture.md:\n" + "\n".join(upward)


def test_the_layers_reader_sees_each_line_of_the_picture():
    text = "## Layers\n\nintro\n\n    a, b (the seam)        (a note, with commas)\n    recipes/c\n\n## Next\n    z\n"
    assert documented_layers(text) == [["a", "b"], ["recipes/c"]]
