"""Fixtures of the viewer tests: demo rollouts captured and built once per session, hostile copies."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


@pytest.fixture(scope="session")
def demo_folders(tmp_path_factory) -> tuple[Path, Path]:
    """(artifact root, dataset folder): three oracle rollouts on the local backend, and their build."""
    from rollout_dataset.builder import build
    from rollout_dataset.demo import capture_demo_rollouts

    root = tmp_path_factory.mktemp("viewer-demo")
    dirs = capture_demo_rollouts(root / "artifacts", task_indices=(0, 1, 2))
    build(dirs, root / "dataset", progress=False)
    return root / "artifacts", root / "dataset"


@pytest.fixture(scope="session")
def hostile_tree(demo_folders, tmp_path_factory) -> Path:
    """A copy of the demo artifacts where the model's answer and the task id hold HTML/script, one folder
    with a corrupt rollout.json, one with a symlinked-out summary, and a symlink to a folder outside."""
    root = tmp_path_factory.mktemp("viewer-hostile") / "tree"
    shutil.copytree(demo_folders[0], root)
    first = root / "rollout-000"
    trace = json.loads((first / "trace.json").read_text())
    for call in trace["calls"]:
        message = call["response"]["choices"][0]["message"]
        message["content"] = HOSTILE + (message.get("content") or "")
    from rollout_dataset.trace_integrity import reseal

    (first / "trace.json").write_text(json.dumps(reseal(trace)))
    summary = json.loads((first / "summary.json").read_text())
    summary["stop_reason"] = HOSTILE
    (first / "summary.json").write_text(json.dumps(summary))
    (root / "rollout-001" / "rollout.json").write_text('{"schema_version": 1, "calls": [', encoding="utf-8")
    outside = tmp_path_factory.mktemp("viewer-outside")
    (outside / "secret.txt").write_text("SECRET-OUTSIDE-PATH")
    shutil.copytree(demo_folders[0] / "rollout-002", outside / "rollout-x")
    (root / "linked").symlink_to(outside / "rollout-x", target_is_directory=True)
    (root / "secret-link.txt").symlink_to(outside / "secret.txt")
    return root


@pytest.fixture(scope="session")
def audited_tree(demo_folders, tmp_path_factory) -> Path:
    """A copy of one demo artifact folder with an `audit.json` (the audit contract's fields): the
    scorer's logprob is the captured one shifted by 0.5 on the first sampled token, equal elsewhere."""
    root = tmp_path_factory.mktemp("viewer-audited") / "tree"
    shutil.copytree(demo_folders[0] / "rollout-000", root / "rollout-000")
    rollout = json.loads((root / "rollout-000" / "rollout.json").read_text())
    sequences, worst = [], []
    for k, seq in enumerate(rollout["sequences"]):
        scored = [lp if m else None for lp, m in zip(seq["logprobs"], seq["loss_mask"])]
        first = seq["loss_mask"].index(1)
        scored[first] = seq["logprobs"][first] - 0.5
        sequences.append({"sequence_index": k, "scorer_logprobs": scored})
        worst.append({"sequence_index": k, "position": first, "token_id": seq["input_ids"][first], "token": "x",
                      "call_index": seq["node_ids"][0], "captured": seq["logprobs"][first],
                      "scored": scored[first], "abs_diff": 0.5})
    audit = {"scorer": "server", "model": "local", "dtype": None, "url": None,
             "summary": {"tokens_scored": 161, "mean_abs_diff": 0.0031, "max_abs_diff": 0.5, "share_over_1e-3": 0.006,
                         "share_over_1e-2": 0.006, "share_over_1e-1": 0.006, "kl_k1": 0.001, "kl_k3": 0.002,
                         "ratio_quantiles": {"p01": 1.0, "p05": 1.0, "p50": 1.0, "p95": 1.0, "p99": 1.0}},
             "sequences": sequences, "not_comparable": [{"call_index": 9, "reason": "no logprobs"}], "worst": worst}
    (root / "rollout-000" / "audit.json").write_text(json.dumps(audit))
    return root


@pytest.fixture(scope="session")
def crafter_tree(tmp_path_factory) -> Path:
    """One short Crafter episode's artifact folder (local backend, the `crafter` policy)."""
    from rollout_dataset.recipes.crafter import CrafterRolloutConfig, run_crafter_rollout

    root = tmp_path_factory.mktemp("viewer-crafter")
    result = run_crafter_rollout(CrafterRolloutConfig(out_dir=root / "episode", seed=1, max_steps=30, max_turns=6,
                                                      area=(32, 32)))
    assert result.ok
    return root


LONE_SURROGATE = "lone \ud800 surrogate"
RIGHT_TO_LEFT_TITLE = "title \u202e"  # a right-to-left override, never closed
RIGHT_TO_LEFT_TOOL = "write_file\u202e"  # a tool name the model wrote, ending in an override never closed


@pytest.fixture(scope="session")
def oddity_tree(demo_folders, tmp_path_factory) -> Path:
    """A copy of two demo artifact folders: ``rollout-000`` whose answers hold a lone surrogate (a
    harness may send one; the trace keeps it as its escape) and whose first answer calls two tools named
    `RIGHT_TO_LEFT_TOOL`, and one folder named ``__proto__`` whose task title opens a right-to-left override."""
    from rollout_dataset.trace_integrity import reseal

    root = tmp_path_factory.mktemp("viewer-oddity") / "tree"
    shutil.copytree(demo_folders[0] / "rollout-000", root / "rollout-000")
    shutil.copytree(demo_folders[0] / "rollout-001", root / "__proto__")
    trace_file = root / "rollout-000" / "trace.json"
    trace = json.loads(trace_file.read_text())
    for call in trace["calls"]:
        message = call["response"]["choices"][0]["message"]
        message["content"] = LONE_SURROGATE + (message.get("content") or "")
    first = trace["calls"][0]["response"]["choices"][0]["message"]
    call = first["tool_calls"][0]
    call["function"]["name"] = RIGHT_TO_LEFT_TOOL
    first["tool_calls"].append(dict(call, id=call["id"] + "-second", function=dict(call["function"])))
    for later in trace["calls"][1:]:  # the conversation the harness sent back names it too
        for message in later["request"]["messages"]:
            for sent in message.get("tool_calls") or []:
                if sent["id"] == call["id"]:
                    sent["function"]["name"] = RIGHT_TO_LEFT_TOOL
    trace_file.write_text(json.dumps(reseal(trace)))  # ASCII: the surrogate stays the escape \ud800
    turns_file = root / "rollout-000" / "turns.json"
    turns = json.loads(turns_file.read_text())
    turns["turns"][0]["tool_calls"] = [RIGHT_TO_LEFT_TOOL, RIGHT_TO_LEFT_TOOL]
    turns_file.write_text(json.dumps(turns))
    summary_file = root / "rollout-000" / "summary.json"  # its tool counts agree with turns.json
    summary = json.loads(summary_file.read_text())
    summary["tool_calls_by_name"].pop("write_file")
    summary["tool_calls_by_name"][RIGHT_TO_LEFT_TOOL] = 2
    summary["tool_calls_total"] += 1
    summary_file.write_text(json.dumps(summary))
    task_file = root / "__proto__" / "task.json"
    task_file.write_text(json.dumps(dict(json.loads(task_file.read_text()), title=RIGHT_TO_LEFT_TITLE)))
    return root


@pytest.fixture(scope="session")
def logprobs_missing_tree(demo_folders, tmp_path_factory) -> tuple[Path, Path]:
    """(artifact tree, its built dataset): a copy of demo ``rollout-000`` whose first call came without
    per-token logprobs (as a streamed Responses call does), exported again, so its sequences hold 0.0
    there and carry a `logprobs_missing` finding on call 0."""
    from rollout_dataset.builder import build
    from rollout_dataset.export import export_rollout
    from rollout_dataset.trace_integrity import reseal

    root = tmp_path_factory.mktemp("viewer-logprobs-missing")
    folder = root / "tree" / "rollout-000"
    shutil.copytree(demo_folders[0] / "rollout-000", folder)
    trace = json.loads((folder / "trace.json").read_text())
    first = trace["calls"][0]
    first["per_token_logps"] = None
    first["response"]["choices"][0]["logprobs"] = None
    (folder / "trace.json").write_text(json.dumps(reseal(trace)))
    old = json.loads((folder / "rollout.json").read_text())
    document = export_rollout(trace["calls"], session_id=old["session_id"], metadata=old["metadata"],
                              capture_level=old["capture_level"], rollout_type=old["rollout_type"])
    (folder / "rollout.json").write_text(json.dumps(document))
    build([folder], root / "dataset", progress=False)
    return root / "tree", root / "dataset"


RIGHT_TO_LEFT = "\u202e"  # RIGHT-TO-LEFT OVERRIDE, never closed


def _rewrite_rollout_text(folder: Path, text: str) -> None:
    """Put `text` at the end of every piece of rollout text a harness or model can write that the
    viewer shows: the tools offered (a description and a property name), a message's role and content,
    a tool call's name and id, the task's title and id (so its group), the model and harness names,
    the finish reason."""
    from rollout_dataset.trace_integrity import reseal

    trace = json.loads((folder / "trace.json").read_text())
    for call in trace["calls"]:
        call["finish_reason"] = (call.get("finish_reason") or "") + text
        for tool in call["request"].get("tools") or []:
            function = tool["function"]
            function["description"] += text
            properties = function["parameters"]["properties"]
            for name in list(properties):
                properties[name + text] = properties.pop(name)
        for message in call["request"]["messages"]:
            message["role"] += text
            message["content"] = (message.get("content") or "") + text
            for sent in message.get("tool_calls") or []:
                sent["id"] += text
                sent["function"]["name"] += text
            if message.get("tool_call_id"):
                message["tool_call_id"] += text
        answer = call["response"]["choices"][0]["message"]
        answer["content"] = (answer.get("content") or "") + text
        for made in answer.get("tool_calls") or []:
            made["id"] += text
            made["function"]["name"] += text
    (folder / "trace.json").write_text(json.dumps(reseal(trace)))
    for name, fields in (("summary.json", ("task_id", "model", "harness")), ("task.json", ("task_id", "title")),
                         ("held_out_tests.json", ("task_id",))):
        document = json.loads((folder / name).read_text())
        document.update({field: (document.get(field) or "") + text for field in fields})
        (folder / name).write_text(json.dumps(document))


@pytest.fixture(scope="session")
def rollout_text_tree(demo_folders, tmp_path_factory) -> Path:
    """Two copies of demo ``rollout-000`` whose rollout text (see `_rewrite_rollout_text`) ends in
    `RIGHT_TO_LEFT` (folder ``right-to-left``) or in `HOSTILE` HTML (folder ``html``)."""
    root = tmp_path_factory.mktemp("viewer-rollout-text") / "tree"
    for name, text in (("right-to-left", RIGHT_TO_LEFT), ("html", HOSTILE)):
        shutil.copytree(demo_folders[0] / "rollout-000", root / name)
        _rewrite_rollout_text(root / name, text)
    return root
