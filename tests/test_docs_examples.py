"""Every fenced code block in README.md and docs/ runs as written, or says why not.

The rule, per block (the fence's language and an optional marker on the line before it):

- ```` ```python ```` with no marker: run. The blocks of one file run in order, in one fresh folder,
  each in its own Python process, with ``OPENAI_BASE_URL`` set to the local backend (oracle policy)
  and ``HF_ENDPOINT`` / ``HF_TOKEN`` set to a loopback stand-in of the Hub (`hub_fixture.FakeHub`).
  It must exit 0 and print no progress bar (the library prints nothing).
- ```` ```yaml ```` / ```` ```toml ````: parsed (a backend script is loaded as the backend loads it).
- ``<!-- example: fragment -->`` before a python block: a piece of a larger program; compiled only.
- ``<!-- example: shell, REASON -->`` before a shell block: commands for a terminal that need what
  REASON names (a model server, the network, a long run); every ``rollout-dataset`` line in it is
  parsed by the CLI's own parser, so a flag that does not exist fails here.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from hub_fixture import FakeHub

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\w*)\s*$")
_MARKER = re.compile(r"^<!--\s*example:\s*(fragment|shell)\b[^>]*-->\s*$")
#: what a progress bar on stderr looks like (tqdm's rate or its bar)
_PROGRESS = re.compile(r"\d+(\.\d+)?(it|rollout|B)/s\]|%\|")


def code_blocks(path: Path) -> list[tuple[int, str, str | None, str]]:
    """``(line, language, marker, code)`` of each fenced block of a markdown file."""
    blocks, lines = [], path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        start, language = i, fence.group(1)
        marker = _MARKER.match(lines[i - 1]) if i else None
        i += 1
        body = []
        while i < len(lines) and lines[i] != "```":
            body.append(lines[i])
            i += 1
        blocks.append((start + 1, language, marker.group(1) if marker else None, "\n".join(body) + "\n"))
        i += 1
    return blocks


ALL_BLOCKS = [(doc, *block) for doc in DOCS for block in code_blocks(doc)]
RUNNABLE_DOCS = sorted({doc for doc, _, language, marker, _ in ALL_BLOCKS if language == "python" and marker is None})


def _id(block) -> str:
    return f"{block[0].relative_to(ROOT)}:{block[1]}"


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=[_id(b) for b in ALL_BLOCKS])
def test_every_code_block_runs_parses_or_is_marked(block):
    doc, line, language, marker, code = block
    if language == "python":
        compile(code, f"{doc.name}:{line}", "exec")
        if marker is None:
            ast.parse(code)  # run by test_the_python_blocks_of_each_doc_run_as_written
        else:
            assert marker == "fragment", f"{_id(block)}: a python block is run, or marked a fragment"
    elif language == "yaml":
        from rollout_dataset.backend.policies import load_script

        assert load_script(yaml.safe_load(code))[0], f"{_id(block)}: a script with no step"
    elif language == "toml":
        tomllib.loads(code)
    else:
        assert marker == "shell", f"{_id(block)}: a {language or 'plain'} block needs <!-- example: shell, REASON -->"
        for command in _cli_lines(code):
            _parse_cli(command, _id(block))


def _cli_lines(code: str) -> list[list[str]]:
    """The ``rollout-dataset ...`` command lines of a shell block (continuations joined, comments cut)."""
    joined = re.sub(r"\[--[^\]]*\]", "", code.replace("\\\n", " "))  # [--optional flags] spelled out
    commands = []
    for line in joined.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for part in re.split(r"\s*;\s*", line.split(" #")[0].strip()):
            words = shlex.split(part, comments=True) if part else []
            while words and "=" in words[0] and not words[0].startswith("-"):
                words = words[1:]  # VAR=value before the command
            if words[:1] == ["rollout-dataset"] and "..." not in words:
                commands.append(words[1:])
    return commands


def _parse_cli(argv: list[str], where: str) -> None:
    from rollout_dataset.cli import build_parser

    try:
        build_parser(argv).parse_args(argv)
    except SystemExit as exited:
        raise AssertionError(f"{where}: `rollout-dataset {shlex.join(argv)}` does not parse") from exited


@pytest.fixture(scope="module")
def example_servers():
    from rollout_dataset.backend import make_policy, run_backend_in_thread
    from rollout_dataset.envs.registry import register_builtin_policies
    from rollout_dataset.tokenizers import load_tokenizer

    register_builtin_policies()
    with FakeHub(token="hf_example") as hub, \
            run_backend_in_thread(tokenizer=load_tokenizer("builtin"), policy=make_policy("oracle"),
                                  served_model_name="local") as backend:
        yield {"OPENAI_BASE_URL": backend.base_url, "HF_ENDPOINT": hub.url, "HF_TOKEN": "hf_example"}


@pytest.mark.parametrize("doc", RUNNABLE_DOCS, ids=[str(d.relative_to(ROOT)) for d in RUNNABLE_DOCS])
def test_the_python_blocks_of_each_doc_run_as_written(doc, example_servers, tmp_path):
    env = {**os.environ, **example_servers, "HF_HOME": str(tmp_path / ".hf"), "HF_HUB_OFFLINE": "0",
           "PYTHONPATH": str(ROOT)}
    for line, language, marker, code in code_blocks(doc):
        if language != "python" or marker is not None:
            continue
        done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=240)
        where = f"{doc.relative_to(ROOT)}:{line}"
        assert done.returncode == 0, f"{where} failed:\n{done.stderr[-3000:]}"
        assert not _PROGRESS.search(done.stderr), f"{where} printed a progress bar:\n{done.stderr[-2000:]}"
