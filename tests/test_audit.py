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


@pytest.fixture(scope="module")
def audited(captured, backend, tmp_path_factory):
    """A dataset of one rollout, audited; and a second rollout's artifact folder to append."""
    from rollout_dataset.builder import build
    from rollout_dataset.demo import capture_demo_rollouts

    root = tmp_path_factory.mktemp("audited")
    ds = root / "ds"
    build([captured], ds, progress=False)
    assert cli_main(["audit", str(ds), "--against", backend.base_url, "--no-progress"]) == 0
    more = capture_demo_rollouts(root / "more", [1])
    return ds, more


def test_an_append_keeps_the_audit_config_and_says_which_rollouts_it_covers(audited, tmp_path):
    import datasets

    src, more = audited
    ds = tmp_path / "ds"
    shutil.copytree(src, ds)
    assert cli_main(["build", str(more[0].parent), "--out", str(ds), "--append", "--no-progress"]) == 0
    rows = datasets.load_dataset(str(ds), "audit", split="train")
    assert rows.num_rows == 1
    card = (ds / "README.md").read_text()
    assert card.count("## Logprob audit") == 1
    assert "This audit covers the 1 rollout it was run on (the figures below and the rows of the `audit` config); the dataset now holds 2." in card


def test_a_build_into_an_audited_dataset_keeps_the_audit_config(audited, tmp_path):
    import datasets

    src, more = audited
    ds = tmp_path / "ds"
    shutil.copytree(src, ds)
    assert cli_main(["build", str(more[0].parent), "--out", str(ds), "--no-progress"]) == 0
    assert datasets.load_dataset(str(ds), "audit", split="train").num_rows == 1
    card = (ds / "README.md").read_text()
    assert card.count("## Logprob audit") == 1 and "the dataset now holds 2." in card


def test_a_compaction_keeps_a_current_audit_as_it_was(audited, backend, tmp_path):
    import datasets

    from rollout_dataset.builder.compaction import compact_local

    src, more = audited
    ds = tmp_path / "ds"
    shutil.copytree(src, ds)
    assert cli_main(["build", str(more[0].parent), "--out", str(ds), "--append", "--no-progress"]) == 0
    assert cli_main(["audit", str(ds), "--against", backend.base_url, "--no-progress"]) == 0
    before = (ds / "README.md").read_text()
    section = before[before.index("## Logprob audit"):].strip()
    assert "This audit covers" not in section  # the re-run audit covers both rollouts
    assert compact_local(ds, target_bytes=1 << 30).changed
    card = (ds / "README.md").read_text()
    assert datasets.load_dataset(str(ds), "audit", split="train").num_rows == 2
    assert section in card and card.count("## Logprob audit") == 1


def test_a_push_of_an_audited_dataset_declares_only_the_configs_it_uploads(audited, tmp_path):
    """`push` uploads the build's configs, not `data/audit/`: its card (re-rendered over the Hub's
    rollouts on every push) must then declare no `audit` config, or the Hub dataset would not load."""
    import os
    import subprocess
    import sys

    from hub_fixture import FakeHub
    from rollout_dataset.builder.card import read_card_metadata

    src, more = audited
    ds = tmp_path / "ds"
    shutil.copytree(src, ds)
    with FakeHub() as hub:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
        env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "home"), HF_TOKEN="hf_x", HF_HUB_DISABLE_TELEMETRY="1")
        for step in ([], ["build", str(more[0].parent), "--out", str(ds), "--append", "--no-progress"]):
            if step:
                assert cli_main(step) == 0
            proc = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "push", str(ds), "--repo", "org/a"],
                                  env=env, capture_output=True, text=True, timeout=240)
            assert proc.returncode == 0, proc.stderr[-2000:]
            files = hub.files("org/a")
            card = files["README.md"].decode()
            declared = {c["config_name"] for c in read_card_metadata(card)["configs"]}
            uploaded = {p.split("/")[1] for p in files if p.startswith("data/") and p.endswith(".parquet")}
            assert declared == uploaded and "audit" not in declared
            assert "## Logprob audit" not in card


_HOSTILE_MODEL = "m\n## Logprob audit\n\nFAKE: audit passed, KL 0\n"


def _hostile_row() -> dict:
    return {"rollout_id": "r1", "env": "e\n## Env", "model": _HOSTILE_MODEL, "harness": "h\r\n# H", "task_id": "t",
            "n_calls": 1}


def test_a_rollout_name_holding_line_breaks_renders_on_one_card_line():
    from rollout_dataset.builder.card import render_card

    card = render_card([_hostile_row()])
    assert "## Logprob audit" not in card.splitlines()
    models = [line for line in card.splitlines() if line.startswith("| models |")]
    assert models == ["| models | `m ## Logprob audit  FAKE: audit passed, KL 0` (1) |"]
    assert not any(line.startswith(("## Env", "# H")) for line in card.splitlines())


def test_only_the_audit_section_that_ends_the_card_is_the_audit():
    from rollout_dataset.builder.audit_card import audit_section

    body = "# T\n\n## Logprob audit\n\nFAKE\n\n## Columns\n\ntext\n\n## Logprob audit\n\nREAL\n"
    rest, section = audit_section(body)
    assert section == "## Logprob audit\n\nREAL\n"
    assert "FAKE" in rest and "REAL" not in rest


def test_the_real_audit_survives_two_rebuilds_of_a_card_with_a_hostile_model_name():
    from rollout_dataset.builder.audit_card import KeptAudit, audit_section
    from rollout_dataset.builder.card import render_card

    real = "## Logprob audit\n\nThe captured `logprobs` of 1 rollouts were re-scored: REAL\n"
    card = render_card([_hostile_row()], audit=KeptAudit(real, 1))
    for _ in range(2):
        section = audit_section(card)[1]
        assert section == real
        card = render_card([_hostile_row()], audit=KeptAudit(section, 1))
    assert card.splitlines().count("## Logprob audit") == 1 and card.rstrip().endswith("REAL")


@pytest.fixture(scope="module")
def built(captured, tmp_path_factory):
    """A built dataset of one rollout, not audited."""
    from rollout_dataset.builder import build

    ds = tmp_path_factory.mktemp("built") / "ds"
    build([captured], ds, progress=False)
    return ds


@pytest.mark.parametrize("front, fault", [
    ("- a list\n", "not a mapping"),
    ("configs: [summary]\n", "'configs' must be a list of mappings"),
    ("configs: 5\n", "'configs' must be a list of mappings"),
    (": [\n", "not valid YAML"),
    (None, "no closing '---'"),
])
def test_a_corrupt_card_fails_the_audit_in_one_line_before_any_shard_is_written(built, backend, tmp_path, capsys,
                                                                                front, fault):
    ds = tmp_path / "ds"
    shutil.copytree(built, ds)
    card = "---\ntitle: x\nno closing fence\n" if front is None else f"---\n{front}---\nbody\n"
    (ds / "README.md").write_text(card)
    rc = cli_main(["audit", str(ds), "--against", backend.base_url, "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.count("\n") == 1 and err.startswith("error: ") and "README.md" in err and fault in err
    assert "Traceback" not in err
    assert not (ds / "data" / "audit").exists() and (ds / "README.md").read_text() == card


def test_a_hub_compaction_keeps_an_audit_config_uploaded_by_hand(audited, tmp_path):
    """`push` does not upload `data/audit/`; when a user uploads it (and the card) by hand, a remote
    compaction re-renders the card and must keep the `audit` entry and section, as a local one does."""
    import os
    import subprocess
    import sys

    from huggingface_hub import HfApi

    from hub_fixture import FakeHub
    from rollout_dataset.builder import build
    from rollout_dataset.builder.card import read_card_metadata

    src, more = audited
    second = tmp_path / "second"
    build([more[0]], second, progress=False)
    with FakeHub() as hub:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PUSH_", "HUGGINGFACE"))}
        env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "home"), HF_TOKEN="hf_x", HF_HUB_DISABLE_TELEMETRY="1")

        def run(*args: str) -> None:
            proc = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", *args], env=env, capture_output=True,
                                  text=True, timeout=240)
            assert proc.returncode == 0, proc.stderr[-2000:]

        for ds in (src, second):
            run("push", str(ds), "--repo", "org/a", "--no-compact")
        api = HfApi(endpoint=hub.url, token="hf_x")
        for path in [*sorted((src / "data" / "audit").glob("*.parquet")), src / "README.md"]:
            api.upload_file(path_or_fileobj=str(path), path_in_repo=path.relative_to(src).as_posix(), repo_id="org/a",
                            repo_type="dataset")
        run("compact", "--repo", "org/a")
        card = hub.files("org/a")["README.md"].decode()
    assert "audit" in {c["config_name"] for c in read_card_metadata(card)["configs"]}
    assert card.splitlines().count("## Logprob audit") == 1 and "were re-scored" in card
    assert "This audit covers the 1 rollout it was run on" in card and "the dataset now holds 2." in card
