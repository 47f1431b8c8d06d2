"""`rollout-dataset audit`: re-scoring captured logprobs on the embedded default, and corrupted captures
each flagged with its reason (never a traceback)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from rollout_dataset.cli import main as cli_main


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    from rollout_dataset.demo import capture_demo_rollouts

    root = tmp_path_factory.mktemp("audit")
    dirs = capture_demo_rollouts(root / "art", [0])
    return dirs[0]


@pytest.fixture(scope="module")
def backend():
    from rollout_dataset.backend import run_backend_in_thread

    with run_backend_in_thread(policy="echo") as b:
        yield b


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "rollout"
    shutil.copytree(src, dst)
    return dst


def _edit_sequences(folder: Path, edit) -> None:
    path = folder / "rollout.json"
    doc = json.loads(path.read_text())
    for seq in doc["sequences"]:
        edit(seq, doc)
    path.write_text(json.dumps(doc))


def _audit(folder: Path, url: str, *extra: str) -> tuple[int, dict]:
    rc = cli_main(["audit", str(folder), "--against", url, "--no-progress", *extra])
    return rc, json.loads((folder / "audit.json").read_text())


def test_audit_on_the_embedded_default_agrees(captured, backend, tmp_path):
    folder = _copy(captured, tmp_path)
    rc, doc = _audit(folder, backend.base_url)
    assert rc == 0
    assert doc["scorer"] == "server" and doc["model"] == "local"
    assert doc["summary"]["tokens_scored"] > 50
    assert doc["summary"]["max_abs_diff"] < 1e-6
    assert doc["findings"] == [] and doc["not_comparable"] == []
    assert {"sequence_index", "position", "token_id", "token", "call_index", "captured", "scored",
            "abs_diff"} <= set(doc["worst"][0])


def test_audit_of_a_built_dataset_writes_an_audit_config_and_card_statement(captured, backend, tmp_path):
    import datasets

    from rollout_dataset.builder import build

    ds = tmp_path / "ds"
    build([captured], ds, progress=False)
    assert cli_main(["audit", str(ds), "--against", backend.base_url, "--no-progress"]) == 0
    rows = datasets.load_dataset(str(ds), "audit", split="train")
    assert rows.num_rows == 1 and rows[0]["mean_abs_diff"] < 1e-6 and rows[0]["scorer"] == "server"
    card = (ds / "README.md").read_text()
    assert "## Logprob audit" in card and 'load_dataset(REPO, "audit", split="train")' in card


def test_logprobs_shifted_by_one_position_are_flagged(captured, backend, tmp_path):
    folder = _copy(captured, tmp_path)
    _edit_sequences(folder, lambda s, d: s.update(logprobs=[0.0] + s["logprobs"][:-1]))
    rc, doc = _audit(folder, backend.base_url)
    assert [f["code"] for f in doc["findings"]] == ["logprobs_shifted"]


def test_ids_of_a_wrong_tokenizer_are_flagged(captured, backend, builtin_tokenizer, tmp_path):
    folder = _copy(captured, tmp_path)
    vocab = len(builtin_tokenizer)
    _edit_sequences(folder, lambda s, d: s.update(input_ids=[(t * 7 + 3) % vocab for t in s["input_ids"]]))
    rc, doc = _audit(folder, backend.base_url)
    assert [f["code"] for f in doc["findings"]] == ["wrong_tokenizer"]


def _logprobs_at_temperature(model, ids, positions, temperature):
    out = {}
    for p in positions:
        a = ids[p - 1]
        full = np.array([model.logprob(a, v) for v in range(model.vocab_size)]) / temperature
        out[p] = float(full[ids[p]] - np.logaddexp.reduce(full))
    return out


def test_a_temperature_0_7_capture_scored_at_1_0_is_flagged(captured, backend, builtin_tokenizer, tmp_path):
    from rollout_dataset.backend.bigram import bigram_for_tokenizer

    folder = _copy(captured, tmp_path)
    model = bigram_for_tokenizer(builtin_tokenizer)

    def at_07(seq, doc):
        positions = [p for p, m in enumerate(seq["loss_mask"]) if m]
        for p, v in _logprobs_at_temperature(model, seq["input_ids"], positions, 0.7).items():
            seq["logprobs"][p] = v

    _edit_sequences(folder, at_07)  # the recorded temperature stays 1.0
    rc, doc = _audit(folder, backend.base_url)
    codes = [f["code"] for f in doc["findings"]]
    assert codes == ["temperature_mismatch"]
    estimate = float(re.search(r"about temperature ([0-9.]+)", doc["findings"][0]["message"]).group(1))
    assert 0.6 <= estimate <= 0.8


def test_max_mean_abs_diff_exits_1_with_one_line_naming_the_rollout(captured, backend, tmp_path, capsys):
    folder = _copy(captured, tmp_path)
    _edit_sequences(folder, lambda s, d: s.update(logprobs=[0.0] + s["logprobs"][:-1]))
    rid = json.loads((folder / "rollout.json").read_text())["metadata"]["rollout_id"]
    capsys.readouterr()
    rc = cli_main(["audit", str(folder), "--against", backend.base_url, "--no-progress", "--max-mean-abs-diff", "1e-3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert len(err) == 1 and err[0].startswith(f"error: rollout {rid}: mean |Δ logprob|")
    assert "--max-mean-abs-diff 0.001" in err[0]


def test_a_call_sampled_with_top_p_is_not_comparable_never_a_mismatch(captured, backend, tmp_path):
    folder = _copy(captured, tmp_path)
    path = folder / "rollout.json"
    doc = json.loads(path.read_text())
    doc["calls"][0]["effective_sampling_params"]["top_p"] = 0.9
    path.write_text(json.dumps(doc))
    rc, out = _audit(folder, backend.base_url, "--max-mean-abs-diff", "1e-6")
    assert rc == 0
    assert out["not_comparable"][0]["call_index"] == 0 and "top_p=0.9" in out["not_comparable"][0]["reason"]


def test_an_absent_input_is_named_in_one_error_line(backend, tmp_path, capsys):
    rc = cli_main(["audit", str(tmp_path / "nope"), "--against", backend.base_url, "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and err[0].startswith("error: ") and "nope" in err[0]


def test_a_corrupt_rollout_json_is_named_in_one_error_line(captured, backend, tmp_path, capsys):
    folder = _copy(captured, tmp_path)
    (folder / "rollout.json").write_text("{not json")
    rc = cli_main(["audit", str(folder), "--against", backend.base_url, "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "rollout.json" in err[0] and err[0].startswith("error: ")


def test_an_unreachable_server_is_named_in_one_error_line(captured, tmp_path, capsys):
    rc = cli_main(["audit", str(captured), "--against", "http://127.0.0.1:9/v1", "--no-progress", "--no-write"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "127.0.0.1:9" in err[0]


def test_local_backend_prompt_logprobs_follow_vllms_shape(backend, builtin_tokenizer):
    import httpx

    from rollout_dataset.backend.bigram import bigram_for_tokenizer

    ids = builtin_tokenizer.encode("def f(x):\n    return x", add_special_tokens=False)
    choice = httpx.post(f"{backend.base_url}/completions", json={"prompt": ids, "max_tokens": 1,
                                                                 "prompt_logprobs": 0}).json()["choices"][0]
    plp = choice["prompt_logprobs"]
    model = bigram_for_tokenizer(builtin_tokenizer)
    assert plp[0] is None and len(plp) == len(ids)
    assert all(list(e) == [str(t)] for e, t in zip(plp[1:], ids[1:]))
    assert [e[str(t)]["logprob"] for e, t in zip(plp[1:], ids[1:])] == model.sequence_logprobs(ids[0], ids[1:])


def test_local_backend_refuses_prompt_logprobs_when_streaming(backend):
    import httpx

    r = httpx.post(f"{backend.base_url}/completions", json={"prompt": [5, 6], "max_tokens": 1, "stream": True,
                                                            "prompt_logprobs": 1})
    assert r.status_code == 400 and "stream=True" in r.text
