"""The training recipes run as written: every card block alone, and each TRL recipe end to end.

Default tier: on a dataset of real captures in groups (`support.training_dataset`), every python
block of the card runs alone in a reader's venv (datasets, huggingface_hub, tokenizers; this package
cannot be imported there), after the helpers' source when its ``*Needs:*`` line says so; a block
that calls the helpers or imports TRL says so; docs/training.md shows the card's recipes; the
helpers' checks name bad input.

Opt-in `trl` tier (`make test-trl`; TRL_PYTHON names a Python holding only torch, TRL 1.16 and
datasets): each recipe runs as written on a CPU (a tiny random model) and trains on exactly the
tokens the dataset marks trainable; GRPO learns from groups (reward std and gradient above 0); the
online recipe captures through the proxy; bad input (groups of one, zero rows, a row longer than the
model's context, another tokenizer) is named before training starts. Each recipe's figures (steps,
first and last loss, tokens trained vs marked, wall time) are printed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rollout_dataset.builder import build, contracts
from rollout_dataset.builder.card import training_recipes
from support.doc_blocks import NEEDS, code_blocks, contracts_source
from support.training_dataset import build_grouped_dataset
from test_builder_contracts import NO_PACKAGE, reader_python

ROOT = Path(__file__).resolve().parents[1]
PLACEHOLDER = "path/to/DATASET_DIR"
TRL_PYTHON = os.environ.get("TRL_PYTHON")
_HELPER_CALL = re.compile(r"\b(grpo_rollout_output|sft_inputs|prompt_completion|check_lengths|check_groups|"
                          r"group_advantages|check_tokenizer)\(")


@pytest.fixture(scope="module")
def grouped(tmp_path_factory):
    """Two tasks, each captured by `oracle` and `echo`: two groups of two, rewards that differ."""
    return build_grouped_dataset(tmp_path_factory.mktemp("grouped"))


@pytest.fixture(scope="module")
def singles(grouped, tmp_path_factory):
    """One rollout per group (two tasks, oracle only), as the demo dataset is."""
    root = tmp_path_factory.mktemp("singles")
    build(sorted((grouped.parent / "runs").glob("*-oracle")), root / "dataset")
    return root / "dataset"


@pytest.fixture(scope="module")
def untrainable(grouped, tmp_path_factory):
    """The grouped dataset with every sequence marked untrainable: the recipes' filter leaves zero rows."""
    copy = tmp_path_factory.mktemp("untrainable") / "dataset"
    shutil.copytree(grouped, copy)
    for shard in (copy / "data" / "sequences").glob("*.parquet"):
        table = pq.read_table(shard)
        column = table.schema.get_field_index("trainable")
        table = table.set_column(column, table.schema.field(column), pa.array([False] * table.num_rows))
        pq.write_table(table, shard)
    return copy


@pytest.fixture(scope="module")
def unmarked(grouped, tmp_path_factory):
    """The grouped dataset without the training template (as a template of an unknown shape gets none)."""
    copy = tmp_path_factory.mktemp("unmarked") / "dataset"
    shutil.copytree(grouped, copy)
    (copy / "tokenizer" / "chat_template_training.jinja").unlink()
    return copy


def card_blocks(dataset: Path):
    card = dataset / "README.md"
    return [b for b in code_blocks(card, card.read_text(encoding="utf-8")) if b.language == "python"]


#: the session's shared `datasets` cache (conftest) is left out: every run here names its dataset by the
#: same relative path, which `datasets` would take for the dataset it cached first
_LEFT_OUT = ("PYTHONPATH", "VIRTUAL_ENV", "MODEL", "OPENAI_BASE_URL", "HF_DATASETS_CACHE")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LEFT_OUT}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), **extra)
    return env


def _folder_with(dataset: Path, cwd: Path) -> Path:
    """A fresh working folder where the card's placeholder path leads to `dataset`."""
    cwd.mkdir(parents=True)
    (cwd / "path" / "to").mkdir(parents=True)
    (cwd / "path" / "to" / "DATASET_DIR").symlink_to(dataset)
    return cwd


def _script(block_code: str, needs) -> str:
    return NO_PACKAGE + (contracts_source() if "helpers" in needs else "") + block_code


# ------------------------------------------------------------------------------ default tier

def test_every_card_block_runs_alone_in_a_readers_venv(grouped, tmp_path):
    blocks = [b for b in card_blocks(grouped) if "trl" not in b.needs]
    assert len(blocks) >= 6
    for n, block in enumerate(blocks):
        assert block.needs <= {"helpers"}, f"card line {block.line}: needs {sorted(block.needs)}"
        cwd = _folder_with(grouped, tmp_path / f"block-{n}")
        done = subprocess.run([reader_python(), "-c", _script(block.code, block.needs)], cwd=cwd,
                              env=_env(tmp_path / f"block-{n}"), capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, f"card line {block.line}:\n{block.code}\n{done.stderr[-3000:]}"


def test_a_card_block_that_needs_the_helpers_or_trl_says_so_in_the_line_above(grouped):
    blocks = card_blocks(grouped)
    assert sum("trl" in b.needs for b in blocks) == 3
    for block in blocks:
        if block.needs_line is not None:
            assert block.needs, f"card line {block.line}: names nothing of {sorted(NEEDS.values())}"
        if _HELPER_CALL.search(block.code) and "def check_lengths" not in block.code:
            assert "helpers" in block.needs, f"card line {block.line} calls the helpers and does not say so"
        if re.search(r"^(from|import) trl\b", block.code, flags=re.M):
            assert "trl" in block.needs, f"card line {block.line} imports trl and does not say so"


def test_docs_training_shows_the_card_s_recipes_as_they_are():
    docs = [b.code.rstrip() for b in code_blocks(ROOT / "docs" / "training.md") if b.language == "python"]
    for name, source in training_recipes().items():
        assert source in docs, f"docs/training.md does not show the {name} recipe as the card does"


def test_the_card_block_of_group_advantages_names_groups_of_one_before_anything_trains(singles, tmp_path):
    block = next(b for b in card_blocks(singles) if "helpers" in b.needs and "group_advantages(" in b.code)
    cwd = _folder_with(singles, tmp_path / "run")
    done = subprocess.run([reader_python(), "-c", _script(block.code, block.needs)], cwd=cwd, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=240)
    assert done.returncode != 0
    assert "every one of the 2 group(s) holds one rollout" in done.stderr


def test_the_card_says_when_every_group_holds_one_rollout(grouped, singles):
    warning = "Every group holds one rollout: a group baseline (GRPO, RLOO) gets no learning signal"
    assert warning in (singles / "README.md").read_text(encoding="utf-8")
    assert warning not in (grouped / "README.md").read_text(encoding="utf-8")


def test_check_lengths_names_zero_rows_and_a_row_longer_than_the_context():
    with pytest.raises(ValueError, match="zero rows"):
        contracts.check_lengths([], 4096, what="sequence")
    with pytest.raises(ValueError, match="sequence r2 is 900 tokens, longer than the model's 512"):
        contracts.check_lengths([100, 900], 512, ["r1", "r2"], "sequence")
    assert contracts.check_lengths([100, 900], 1024) == 900


def test_group_advantages_are_grpo_s_and_rloo_s_within_each_group():
    rewards, groups = [1.0, 0.0, 0.5, 0.25, 0.75], ["a", "a", "b", "b", "b"]
    grpo = contracts.group_advantages(rewards, groups, eps=0.0)
    assert grpo[:2] == pytest.approx([0.5 ** 0.5, -(0.5 ** 0.5)])  # (r - 0.5) / sample std 0.7071
    assert grpo[2:] == pytest.approx([0.0, -1.0, 1.0])
    rloo = contracts.group_advantages(rewards, groups, baseline="leave_one_out", scale=False)
    assert rloo == pytest.approx([1.0, -1.0, 0.0, -0.375, 0.375])
    assert contracts.group_advantages([1.0, 0.0, 1.0], ["a", "a", "c"])[2] == 0.0  # alone in its group


def test_groups_of_one_and_unscored_rewards_are_refused():
    with pytest.raises(ValueError, match="every one of the 3 group"):
        contracts.group_advantages([1.0, 0.0, 1.0], ["a", "b", "c"])
    with pytest.raises(ValueError, match="zero rows"):
        contracts.check_groups([])
    with pytest.raises(ValueError, match="row 1 .* no reward"):
        contracts.group_advantages([1.0, None], ["a", "a"])


def test_check_tokenizer_names_the_tokens_that_differ(grouped):
    tokenizer_json = json.loads((grouped / "tokenizer" / "tokenizer.json").read_text(encoding="utf-8"))
    from transformers import AutoTokenizer

    vocab = AutoTokenizer.from_pretrained(str(grouped / "tokenizer")).get_vocab()
    assert contracts.check_tokenizer(tokenizer_json, vocab) == len(vocab)
    with pytest.raises(ValueError, match=r"not the dataset's: 1 of \d+ tokens differ \('<extra>': dataset None"):
        contracts.check_tokenizer(tokenizer_json, {**vocab, "<extra>": len(vocab)})


# ------------------------------------------------------------------------------ trl tier

needs_trl = pytest.mark.skipif(not TRL_PYTHON, reason="opt-in: make test-trl (TRL_PYTHON)")

_SAVE_MODEL = '''
import sys
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
source, out, context, extra = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
tokenizer = AutoTokenizer.from_pretrained(source)
tokenizer.add_tokens(extra)
Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=context)
                 ).save_pretrained(out)
tokenizer.save_pretrained(out)
'''


@pytest.fixture(scope="module")
def models(grouped, tmp_path_factory):
    """Tiny random models in a folder each: `model` (the dataset's tokenizer), `short` (a 256-token
    context), `other` (the dataset's tokenizer plus one token: another tokenizer)."""
    root = tmp_path_factory.mktemp("models")
    specs = {"model": ("4096",), "short": ("256",), "other": ("4096", "<extra>")}
    for name, args in specs.items():
        done = subprocess.run([TRL_PYTHON, "-c", _SAVE_MODEL, str(grouped / "tokenizer"), str(root / name), *args],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    return {name: root / name for name in specs}


def _trl_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return _env(tmp_path, TRL_EXPERIMENTAL_SILENCE="1", TOKENIZERS_PARALLELISM="false", **extra)


def _run_recipe(block, dataset: Path, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    _folder_with(dataset, cwd)
    return subprocess.run([TRL_PYTHON, "-c", _script(block.code, block.needs)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=1200)


def _recipe(dataset: Path, name: str):
    source = training_recipes()[name]
    return next(b for b in card_blocks(dataset) if b.code.rstrip() == source)


def _figures(name: str, done: subprocess.CompletedProcess, wall_s: float) -> dict:
    got = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"recipe {name}: {json.dumps(got)}; wall {wall_s:.1f} s")
    return got


@pytest.mark.trl
@needs_trl
@pytest.mark.parametrize("name", ["sft_conversations", "sft_sequences", "grpo_offline"])
def test_each_card_recipe_trains_on_exactly_the_tokens_the_dataset_marks(grouped, tmp_path, name):
    started = time.monotonic()
    done = _run_recipe(_recipe(grouped, name), grouped, tmp_path / "run", _trl_env(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    got = _figures(name, done, time.monotonic() - started)
    assert got["steps"] >= 2
    assert got["tokens_trained"] == got["tokens_marked"] > 0
    if name == "grpo_offline":
        assert min(got["reward_std"]) > 0 and min(got["grad_norm"]) > 0  # a learning signal in every step
    else:
        assert got["max_length"] >= 1000  # the longest row (TRL's default 1024 would cut it)



@pytest.mark.trl
@needs_trl
@pytest.mark.parametrize("name, dataset, model, message", [
    ("grpo_offline", "singles", None, "every one of the 2 group(s) holds one rollout"),
    ("sft_sequences", "untrainable", None, "no sequences to train on: the config (after filtering) has zero rows"),
    ("sft_sequences", "grouped", "short", "tokens, longer than the model's 256"),
    ("sft_conversations", "grouped", "other", "the model's tokenizer is not the dataset's: 1 of"),
    ("sft_conversations", "unmarked", None, "chat_template_training.jinja is missing"),
], ids=["groups-of-one", "zero-rows", "row-longer-than-context", "another-tokenizer", "no-training-template"])
def test_bad_input_is_named_before_training_starts(request, tmp_path, name, dataset, model, message):
    folder = request.getfixturevalue(dataset)
    extra = {"MODEL": str(request.getfixturevalue("models")[model])} if model else {}
    done = _run_recipe(_recipe(folder, name), folder, tmp_path / "run", _trl_env(tmp_path, **extra))
    assert done.returncode != 0, done.stdout[-2000:]
    assert message in done.stderr, done.stderr[-3000:]
    assert "train_runtime" not in done.stdout + done.stderr  # nothing trained



@pytest.mark.trl
@needs_trl
def test_online_grpo_captures_each_generation_through_the_proxy(models, tmp_path):
    from rollout_dataset.backend import make_policy, run_backend_in_thread
    from rollout_dataset.envs.registry import register_builtin_policies
    from rollout_dataset.tokenizers import load_tokenizer

    block = next(b for b in code_blocks(ROOT / "docs" / "training.md") if "server" in b.needs)
    assert {"helpers", "trl", "cli", "server", "model"} <= block.needs
    bin_dir = tmp_path / "bin"  # the `rollout-dataset` command of this checkout
    bin_dir.mkdir()
    (bin_dir / "rollout-dataset").write_text(f'#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m rollout_dataset.cli "$@"\n')
    (bin_dir / "rollout-dataset").chmod(0o755)
    register_builtin_policies()
    started = time.monotonic()
    with run_backend_in_thread(tokenizer=load_tokenizer("builtin"), policy=make_policy("oracle"),
                               served_model_name="local") as backend:
        env = _trl_env(tmp_path, OPENAI_BASE_URL=backend.base_url, MODEL=str(models["model"]),
                       PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", TMPDIR=str(tmp_path))
        (tmp_path / "run").mkdir()
        done = subprocess.run([TRL_PYTHON, "-c", _script(block.code, block.needs)], cwd=tmp_path / "run", env=env,
                              capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    got = _figures("grpo_online", done, time.monotonic() - started)
    assert got["steps"] == 2 and got["tokens_trained"] > 0
    captured = sorted(tmp_path.glob("online-rollouts-*/step*/summary.json"))
    assert len(captured) == 4  # 2 steps x 1 task x num_generations 2: one capture per repeated prompt

