"""Trainer contracts, groups and conversations, and the card's snippets run without this package."""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest

from rollout_dataset.builder import build, contracts
from rollout_dataset.builder.synthetic import write_synthetic_rollout

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


def run_without_package(script: str, cwd: Path, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `script` in a fresh interpreter where `rollout_dataset` cannot be imported."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update({"HF_HOME": str(cwd / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1"}, **(env_extra or {}))
    return subprocess.run([sys.executable, "-c", NO_PACKAGE + script], cwd=cwd, env=env, capture_output=True,
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


def test_every_card_snippet_runs_with_only_datasets(dataset, tmp_path):
    readme = (dataset / "README.md").read_text()
    blocks = card_code_blocks(readme)
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
