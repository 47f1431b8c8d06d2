"""Every fenced code block in README.md and docs/ runs as written, alone, or says what it needs.

The rule, per block (the fence's language and the line right before it; `support.doc_blocks`):

- ```` ```python ```` with nothing above: run alone, in a fresh folder, in its own Python process,
  with no model server, Hub or token in the environment. It must exit 0 and print no progress bar
  (the library prints nothing).
- ``*Needs: WHAT.*`` above a python block: WHAT names what it needs beyond that (`doc_blocks.NEEDS`):
  a model server at ``OPENAI_BASE_URL`` (the local backend, oracle policy), ``HF_TOKEN`` (a loopback
  stand-in of the Hub, `hub_fixture.FakeHub`), the block above (run after it, in its folder), the
  helpers' source (run first). A block that needs `trl` runs in the opt-in `trl` tier
  (tests/test_training_recipes.py); here it is compiled.
- ```` ```yaml ```` / ```` ```toml ````: parsed (a backend script is loaded as the backend loads it).
- ``<!-- example: fragment -->`` before a python block: a piece of a larger program; compiled only.
- ``<!-- example: shell, REASON -->`` before a shell block: commands for a terminal that need what
  REASON names (a model server, the network, a long run); every ``rollout-dataset`` line in it is
  parsed by the CLI's own parser, so a flag that does not exist fails here.
"""

from __future__ import annotations

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

from support.doc_blocks import NEEDS, Block, code_blocks, contracts_source

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: what a progress bar on stderr looks like (tqdm's rate or its bar)
_PROGRESS = re.compile(r"\d+(\.\d+)?(it|rollout|B)/s\]|%\|")
#: needs this tier provides (the rest, `trl` and what comes with it, are the `trl` tier's)
_PROVIDED = {"helpers", "server", "hub", "above", "cli"}
#: names only the helpers' source defines
_HELPER_NAMES = re.compile(r"\b(grpo_rollout_output|sft_inputs|prompt_completion|check_lengths|check_groups|"
                           r"group_advantages|check_tokenizer)\(")

ALL_BLOCKS = [block for doc in DOCS for block in code_blocks(doc)]
RUNNABLE_DOCS = sorted({b.path for b in ALL_BLOCKS if b.language == "python" and b.marker is None
                        and "trl" not in b.needs})


def _id(block: Block) -> str:
    return f"{block.path.relative_to(ROOT)}:{block.line}"


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=[_id(b) for b in ALL_BLOCKS])
def test_every_code_block_runs_parses_or_is_marked(block):
    language, marker, code = block.language, block.marker, block.code
    if block.needs_line is not None:
        assert block.needs, f"{_id(block)}: '*Needs: {block.needs_line}.*' names nothing of {sorted(NEEDS.values())}"
    if language == "python":
        compile(code, f"{block.path.name}:{block.line}", "exec")
        if marker is not None:
            assert marker == "fragment", f"{_id(block)}: a python block is run, or marked a fragment"
        else:  # run here or in the trl tier: what it cannot run without is named above it
            if _HELPER_NAMES.search(code) and "def check_lengths" not in code:
                assert "helpers" in block.needs, f"{_id(block)}: calls the helpers without '*Needs: the helpers' source'"
            if re.search(r"^\s*(from|import) trl\b", code, flags=re.M):
                assert "trl" in block.needs, f"{_id(block)}: imports trl without '*Needs: ... `trl` ...*'"
            if "os.environ[\"OPENAI_BASE_URL\"]" in code:
                assert "server" in block.needs, f"{_id(block)}: reads OPENAI_BASE_URL without naming it above"
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
        yield {"server": {"OPENAI_BASE_URL": backend.base_url},
               "hub": {"HF_ENDPOINT": hub.url, "HF_TOKEN": "hf_example", "HF_HUB_OFFLINE": "0"}}


#: what a block gets only when it says it needs it
_NEEDED_ONLY = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "HF_ENDPOINT", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "PYTHONPATH")


@pytest.mark.parametrize("doc", RUNNABLE_DOCS, ids=[str(d.relative_to(ROOT)) for d in RUNNABLE_DOCS])
def test_the_python_blocks_of_each_doc_run_alone_as_written(doc, example_servers, tmp_path):
    base = {k: v for k, v in os.environ.items() if k not in _NEEDED_ONLY}
    base.update(HF_HUB_OFFLINE="1", PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    folder = tmp_path
    for n, block in enumerate(code_blocks(doc)):
        if block.language != "python" or block.marker is not None or "trl" in block.needs:
            continue
        missing = block.needs - _PROVIDED
        assert not missing, f"{_id(block)}: needs {sorted(missing)}, which only the trl tier provides"
        if "above" not in block.needs:
            folder = tmp_path / f"block-{n}"  # alone: a fresh folder
            folder.mkdir()
        env = {**base, "HF_HOME": str(tmp_path / ".hf")}
        for need in block.needs & {"server", "hub"}:
            env.update(example_servers[need])
        # the package of this checkout, as an install would give it (not through PYTHONPATH: a block sees none)
        code = ("import sys; sys.path.insert(0, " + repr(str(ROOT)) + ")\n"
                + (contracts_source() if "helpers" in block.needs else "") + block.code)
        done = subprocess.run([sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True,
                              timeout=240)
        assert done.returncode == 0, f"{_id(block)} failed:\n{done.stderr[-3000:]}"
        assert not _PROGRESS.search(done.stderr), f"{_id(block)} printed a progress bar:\n{done.stderr[-2000:]}"
