"""Trainer contracts, groups and conversations, and the card's snippets run without this package."""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest

from rollout_dataset.builder import build, contracts
from support.synthetic_dataset import write_synthetic_rollout

# Prepended to every out-of-package script: `import rollout_dataset` fails, as for a reader of the Hub page.
NO_PACKAGE = '''import sys
class _NoRolloutDataset:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "rollout_dataset":
            raise ImportError("rollout_dataset is not installed here: card snippets must not need it")
sys.meta_path.insert(0, _NoRolloutDataset())
'''


def card_code_blocks(readme: str) -> list[str]:
    """Every ```python block of a rendered card, in order."""
    return re.findall(r"```python\n(.*?)```", readme, flags=re.S)


def reader_blocks(readme: str) -> list[str]:
    """The card's blocks a reader runs with datasets alone (not the TRL recipes), in order."""
    return [b for b in card_code_blocks(readme) if not re.search(r"^(from|import) trl\b", b, flags=re.M)]


# A reader's venv (`make reader-venv`, which `make test` runs): datasets, huggingface_hub and
# tokenizers only, as a user of the published dataset has them.
READER_PYTHON = Path(__file__).resolve().parents[1] / ".venv-reader" / "bin" / "python"


def reader_python() -> str:
    """The reader venv's interpreter (`make test` builds it; a bare pytest run needs `make reader-venv`)."""
    if not READER_PYTHON.is_file():
        pytest.fail(f"{READER_PYTHON} is missing: run `make reader-venv` (make test does)")
    return str(READER_PYTHON)


def run_without_package(script: str, cwd: Path, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `script` in the reader venv, where `rollout_dataset` is not installed (and cannot be imported)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update({"HF_HOME": str(cwd / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1"}, **(env_extra or {}))
    return subprocess.run([reader_python(), "-c", NO_PACKAGE + script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=240)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("contracts")
    for seed in range(3):  # task 0 twice (one group of two), task 1 once
        write_synthetic_rollout(root / "in" / f"r{seed}", n_turns=3, context_tokens=300, seed=seed,
                                task_index=0 if seed < 2 else 1)
    build([root / "in"], root / "ds", progress=False)
    return root / "ds"


def _rows(ds: Path, config: str) -> list[dict]:
    return [r for p in sorted((ds / "data" / config).glob("*.parquet")) for r in pq.read_table(p).to_pylist()]


def test_grpo_output_splits_at_the_prompt_and_masks_environment_tokens(dataset):
    row = next(r for r in _rows(dataset, "sequences") if r["trainable"])
    out = contracts.grpo_rollout_output(row)
    p = row["prompt_len"]
    assert out["prompt_ids"] + out["completion_ids"] == row["input_ids"]
    assert out["env_mask"] == row["loss_mask"][p:]
    assert 0 in out["env_mask"] and 1 in out["env_mask"]  # tool output between turns is masked out
    assert len(out["logprobs"]) == len(out["completion_ids"]) and "completion_mask" not in out


def test_a_batch_gives_the_outputs_of_its_rows_as_lists(dataset):
    seqs = datasets.load_dataset(str(dataset), "sequences", split="train")
    for helper in (contracts.grpo_rollout_output, contracts.sft_inputs, contracts.prompt_completion):
        batch = helper(seqs[0:3])
        rows = [helper(seqs[i]) for i in range(3)]
        assert batch == {k: [r[k] for r in rows] for k in rows[0]}


def test_sft_inputs_mask_the_whole_sequence(dataset):
    row = next(r for r in _rows(dataset, "sequences") if r["trainable"])
    out = contracts.sft_inputs(row)
    assert out == {"input_ids": row["input_ids"], "assistant_masks": row["loss_mask"]}


def test_a_misaligned_row_is_refused_with_its_ids(dataset):
    row = dict(_rows(dataset, "sequences")[0])
    row["loss_mask"] = row["loss_mask"][:-1]
    with pytest.raises(ValueError, match=f"rollout {row['rollout_id']} sequence"):
        contracts.grpo_rollout_output(row)


def test_the_contracts_module_imports_nothing_so_the_card_can_paste_it():
    tree = ast.parse(inspect.getsource(contracts))
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_group_id_joins_rollouts_of_one_task_and_seed_on_summary_and_sequences(dataset):
    summary = _rows(dataset, "summary")
    groups = {r["rollout_id"]: r["group_id"] for r in summary}
    assert sorted(groups.values()) == ["coding:task-0:0", "coding:task-0:0", "coding:task-1:0"]
    assert all(s["group_id"] == groups[s["rollout_id"]] for s in _rows(dataset, "sequences"))
    readme = (dataset / "README.md").read_text()
    assert "This dataset has 2 group(s)" in readme and re.search(r"min 1\.0, max\s+2\.0", readme)


def test_conversations_are_the_last_call_messages_plus_the_answer_with_typed_features(dataset):
    conv = datasets.load_dataset(str(dataset), "conversations", split="train")
    assert isinstance(conv.features["messages"], datasets.List)
    assert set(conv.features["messages"].feature) == {"role", "content", "reasoning_content", "tool_calls",
                                                       "tool_call_id"}
    seqs = [s for s in _rows(dataset, "sequences") if s["trainable"]]
    assert conv.num_rows == len(seqs)
    row = conv[0]
    folder = next(p for p in (dataset.parent / "in").iterdir()
                  if json.loads((p / "summary.json").read_text())["rollout_id"] == row["rollout_id"])
    trace = json.loads((folder / "trace.json").read_text())
    seq = next(s for s in seqs if s["rollout_id"] == row["rollout_id"])
    last = next(c for c in trace["calls"] if c["index"] == seq["node_ids"][-1])
    want = last["request"]["messages"] + [last["response"]["choices"][0]["message"]]
    assert [m["role"] for m in row["messages"]] == [m["role"] for m in want]
    assert [m["content"] for m in row["messages"]] == [m.get("content") for m in want]
    assert json.loads(row["tools"]) == last["request"]["tools"]


def test_a_chat_message_keeps_tool_calls_typed_and_turns_odd_values_into_text():
    from rollout_dataset.builder.rows import chat_message

    msg = chat_message({"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                        "reasoning": "think", "tool_calls": [{"id": "c1", "type": "function", "function":
                                                              {"name": "run", "arguments": {"cmd": "ls"}}}, 7]})
    assert msg["content"] == "ab" and msg["reasoning_content"] == "think"
    assert msg["tool_calls"][0] == {"id": "c1", "type": "function", "function": {"name": "run",
                                                                                  "arguments": '{"cmd":"ls"}'}}
    assert msg["tool_calls"][1]["function"] == {"name": None, "arguments": None}
    assert chat_message(["not", "a", "message"])["content"] == '["not","a","message"]'
    assert chat_message({"role": "tool", "tool_call_id": "c1", "content": 3}) == {
        "role": "tool", "content": "3", "reasoning_content": None, "tool_calls": None, "tool_call_id": "c1"}


def test_a_run_without_the_package_cannot_import_it(tmp_path):
    assert run_without_package("import rollout_dataset", tmp_path).returncode != 0


def test_the_reader_venv_holds_datasets_and_not_this_package_or_transformers():
    listed = subprocess.run([reader_python(), "-m", "pip", "list", "--format=freeze"], capture_output=True,
                            text=True, timeout=120).stdout.lower()
    names = {line.split("==")[0].replace("_", "-") for line in listed.splitlines()}
    assert {"datasets", "huggingface-hub", "tokenizers"} <= names
    assert not names & {"rollout-dataset", "transformers", "torch"}


def test_the_card_snippets_give_trainer_inputs_and_conversations_with_only_datasets(dataset, tmp_path):
    readme = (dataset / "README.md").read_text()
    blocks = reader_blocks(readme)
    assert len(blocks) >= 5 and not any("rollout_dataset" in b for b in blocks)
    script = "\n".join(blocks).replace("path/to/DATASET_DIR", str(dataset))
    script += '\nimport json\nprint(json.dumps({"env_mask": one["env_mask"], "n_sft": len(sft), "roles": roles}))\n'
    done = run_without_package(script, tmp_path, {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    first = next(r for r in _rows(dataset, "sequences") if r["trainable"])
    assert got["env_mask"] == first["loss_mask"][first["prompt_len"]:]
    assert got["n_sft"] == sum(r["trainable"] for r in _rows(dataset, "sequences"))
    assert got["roles"][0] == "system" and "tool" in got["roles"]


# ------------------------------------------------------------------------------------ the tokenizer

def _with_tokenizer(folder: Path, tokenizer: str) -> Path:
    task = json.loads((folder / "task.json").read_text())
    task["config"]["tokenizer"] = tokenizer
    (folder / "task.json").write_text(json.dumps(task))
    return folder


def test_build_stores_the_captures_tokenizer_and_its_hash_on_every_summary_row(dataset):
    from rollout_dataset.tokenizers import BUILTIN_TOKENIZER_DIR

    stored = dataset / "tokenizer"
    assert (stored / "tokenizer.json").read_bytes() == (BUILTIN_TOKENIZER_DIR / "tokenizer.json").read_bytes()
    assert {"tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"} <= {p.name for p in stored.iterdir()}
    sha = hashlib.sha256((stored / "tokenizer.json").read_bytes()).hexdigest()
    assert {r["tokenizer_sha256"] for r in _rows(dataset, "summary")} == {sha}


def test_captures_of_two_tokenizers_in_one_build_are_refused_and_nothing_is_kept(tmp_path):
    from rollout_dataset.tokenizers import BUILTIN_TOKENIZER_DIR
    from rollout_dataset.errors import TokenizerMismatchError

    other = tmp_path / "other-tokenizer"
    shutil.copytree(BUILTIN_TOKENIZER_DIR, other)
    data = json.loads((other / "tokenizer.json").read_text())
    (other / "tokenizer.json").write_text(json.dumps(data, indent=1))  # same vocab, different bytes
    write_synthetic_rollout(tmp_path / "in" / "a", n_turns=2, context_tokens=64, seed=0)
    write_synthetic_rollout(tmp_path / "in" / "b", n_turns=2, context_tokens=64, seed=1)
    _with_tokenizer(tmp_path / "in" / "b", str(other))
    with pytest.raises(TokenizerMismatchError, match=r"in/b: tokenizer .*other-tokenizer.* differs"):
        build([tmp_path / "in"], tmp_path / "ds", progress=False)
    assert not list((tmp_path / "ds").rglob("*.parquet")) and not (tmp_path / "ds" / "tokenizer").exists()
    build([tmp_path / "in" / "a"], tmp_path / "ds", progress=False)
    with pytest.raises(TokenizerMismatchError, match="differs"):  # nor into a dataset of another tokenizer
        build([tmp_path / "in" / "b"], tmp_path / "ds", progress=False)


def test_a_hub_tokenizer_is_read_from_the_cache_with_its_resolved_revision(tmp_path):
    from rollout_dataset.tokenizers import BUILTIN_TOKENIZER_DIR
    from rollout_dataset.builder.tokenizer_files import resolve_tokenizer_files

    commit = "a" * 40
    snap = tmp_path / "hub" / "models--org--tok" / "snapshots" / commit
    shutil.copytree(BUILTIN_TOKENIZER_DIR, snap)
    (tmp_path / "hub" / "models--org--tok" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--tok" / "refs" / "main").write_text(commit)
    tok = resolve_tokenizer_files("org/tok", cache_dir=tmp_path / "hub")
    assert (tok.hub_id, tok.revision) == ("org/tok", commit)
    assert resolve_tokenizer_files("org/not-cached", cache_dir=tmp_path / "hub") is None


# ------------------------------------------------------------------- done when: from the Hub copy alone

_READER = '''
import json, re
from huggingface_hub import hf_hub_download
readme = open(hf_hub_download("org/standalone", "README.md", repo_type="dataset"), encoding="utf-8").read()
ns = {}
blocks = re.findall(r"```python\\n(.*?)```", readme, flags=re.S)
exec("\\n".join(b for b in blocks if not re.search(r"^(from|import) trl\\b", b, flags=re.M)), ns)
print(json.dumps({"text": ns["text"], "env_mask": ns["one"]["env_mask"], "n_sft": len(ns["sft"]),
                  "roles": ns["roles"], "messages": repr(ns["conversations"].features["messages"])}))
'''


def test_from_the_hub_copy_alone_a_reader_decodes_builds_trainer_inputs_and_loads_conversations(dataset, tmp_path):
    from hub_fixture import FakeHub
    from tokenizers import Tokenizer

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PUSH_", "HUGGINGFACE"))}
    with FakeHub() as hub:
        env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "pusher"), HF_HUB_DISABLE_TELEMETRY="1")
        push = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "push", str(dataset), "--repo",
                               "org/standalone"], env=env, capture_output=True, text=True, timeout=240)
        assert push.returncode == 0, push.stderr[-3000:]
        main_files, trace_files = set(hub.files("org/standalone")), set(hub.files("org/standalone-traces"))
        assert {"tokenizer/tokenizer.json", "tokenizer/chat_template.jinja"} <= main_files
        assert not any(f.startswith("traces/") for f in main_files)  # one loader per repo: sessions go aside
        assert {f"sessions/{r['rollout_id']}.jsonl" for r in _rows(dataset, "summary")} <= trace_files
        assert "datasets/org/standalone-traces" in hub.files("org/standalone")["README.md"].decode()
        done = run_without_package(_READER, tmp_path, {"HF_ENDPOINT": hub.url, "HF_TOKEN": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    seqs = datasets.load_dataset(str(dataset), "sequences", split="train")
    want = Tokenizer.from_file(str(dataset / "tokenizer" / "tokenizer.json"))
    assert got["text"] == want.decode(seqs[0]["input_ids"], skip_special_tokens=False) and got["text"]
    first = next(r for r in seqs if r["trainable"])
    assert got["env_mask"] == first["loss_mask"][first["prompt_len"]:]
    assert got["n_sft"] == sum(seqs["trainable"]) and got["roles"][0] == "system"
    assert got["messages"].startswith("List({'role': Value('string')")
