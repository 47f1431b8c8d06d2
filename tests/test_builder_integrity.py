"""`build`, `show` and `validate` on bad input: one named line and a non-zero exit, never a traceback.

`build` checks every artifact folder with the rules of `validate`, refuses symlinks that leave the
folder, and refuses an `--out` that is not a dataset this tool built; a refused build leaves `--out`
as it was.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rollout_dataset.builder import build
from support.synthetic_dataset import write_synthetic_rollout
from rollout_dataset.cli import main

JSON_FILES = ("summary.json", "task.json", "trace.json", "rollout.json", "turns.json", "held_out_tests.json")
TEXT_FILES = ("visible_tests.txt", "samples.md")

# a value of the wrong type in each document (the schemas say otherwise)
WRONG_TYPES = {
    "summary.json": lambda d: d.update(env_reward="high"),
    "task.json": lambda d: d.update(task_id=7),
    "trace.json": lambda d: d.update(calls={"0": d["calls"][0]}),
    "rollout.json": lambda d: d["sequences"][0].update(input_ids="1 2 3"),
    "turns.json": lambda d: d.update(turns="none"),
    "held_out_tests.json": lambda d: d.update(tests=5),
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pristine") / "rollout"
    write_synthetic_rollout(folder, seed=5, n_turns=2, context_tokens=64)
    return folder


@pytest.fixture
def art(pristine, tmp_path):
    copy = tmp_path / "rollout"
    shutil.copytree(pristine, copy)
    return copy


def _edit(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _corrupt(folder: Path, fname: str, kind: str) -> None:
    path = folder / fname
    if kind == "invalid-utf8":
        path.write_bytes(b'{"text": "\xff\xfe"}' if fname.endswith(".json") else b"tests \xff\xfe\n")
    elif kind == "empty-list":
        path.write_text("[]")
    elif kind == "wrong-type":
        _edit(path, WRONG_TYPES[fname])
    elif kind == "too-deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == "a-folder":
        path.unlink()
        path.mkdir()


def _cli(capsys, *args) -> tuple[int, list[str]]:
    code = main([*map(str, args)])
    captured = capsys.readouterr()
    return code, (captured.out + captured.err).splitlines()


def _build_cli(capsys, folder: Path, out: Path) -> tuple[int, list[str]]:
    return _cli(capsys, "build", folder, "--out", out, "--no-progress")


CASES = [(f, k) for f in JSON_FILES for k in ("invalid-utf8", "empty-list", "wrong-type")] + \
        [(f, "invalid-utf8") for f in TEXT_FILES] + [("trace.json", "too-deep"), ("turns.json", "a-folder")]


@pytest.mark.parametrize(("fname", "kind"), CASES)
def test_build_of_a_corrupt_file_fails_with_one_line_naming_the_file(art, tmp_path, capsys, fname, kind):
    _corrupt(art, fname, kind)
    code, lines = _build_cli(capsys, art, tmp_path / "ds")
    assert code == 1
    assert len(lines) == 1 and lines[0].startswith(f"error: {art / fname}: $"), lines
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize(("fname", "kind"), CASES)
def test_validate_of_a_corrupt_file_names_the_file(art, capsys, fname, kind):
    _corrupt(art, fname, kind)
    code, lines = _cli(capsys, "validate", art)
    assert code == 1
    assert any(line.startswith(f"{art / fname}: $") for line in lines), lines


@pytest.mark.parametrize("kind", ["invalid-utf8", "empty-list", "wrong-type", "too-deep", "a-folder"])
@pytest.mark.parametrize("fname", ["rollout.json", "trace.json"])
def test_show_of_a_corrupt_file_fails_with_one_line_naming_the_file(art, capsys, fname, kind):
    if fname == "trace.json":
        (art / "rollout.json").unlink()  # show builds the document from trace.json
    _corrupt(art, fname, kind)
    code, lines = _cli(capsys, "show", art)
    assert code == 1
    assert len(lines) == 1 and lines[0].startswith(f"error: {art / fname}: "), lines


@pytest.mark.parametrize(("change", "path"), [
    (lambda d: d.clear() or None, "$"),
    (lambda d: d["sequences"][0].update(loss_mask=d["sequences"][0]["loss_mask"][:-1]), "$.sequences[0].loss_mask"),
    (lambda d: d["sequences"][0].update(input_ids=None), "$.sequences[0].input_ids"),
], ids=["empty-list", "short-loss-mask", "null-input-ids"])
def test_an_inconsistent_rollout_json_fails_the_build_naming_file_and_json_path(art, tmp_path, capsys, change, path):
    doc = json.loads((art / "rollout.json").read_text())
    change(doc)
    (art / "rollout.json").write_text("[]" if not doc else json.dumps(doc))
    code, lines = _build_cli(capsys, art, tmp_path / "ds")
    assert code == 1
    assert lines[0].startswith(f"error: {art / 'rollout.json'}: {path}:"), lines


def test_build_into_an_existing_dataset_leaves_it_untouched_when_a_rollout_is_invalid(pristine, art, tmp_path, capsys):
    build([pristine], tmp_path / "ds", progress=False)
    before = {p.relative_to(tmp_path / "ds"): p.read_bytes() for p in (tmp_path / "ds").rglob("*") if p.is_file()}
    write_synthetic_rollout(tmp_path / "new", seed=6, n_turns=2, context_tokens=64)
    _corrupt(tmp_path / "new", "rollout.json", "empty-list")
    code, lines = _build_cli(capsys, tmp_path / "new", tmp_path / "ds")
    assert code == 1 and str(tmp_path / "new" / "rollout.json") in lines[0]
    after = {p.relative_to(tmp_path / "ds"): p.read_bytes() for p in (tmp_path / "ds").rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "new", "rollout"]  # no staging left


@pytest.mark.parametrize("fname", ["samples.md", "task.json"])
def test_an_artifact_file_symlinked_outside_its_folder_is_refused_by_build_and_validate(art, tmp_path, capsys, fname):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / fname).write_bytes((art / fname).read_bytes())  # valid content: only the link is wrong
    (art / fname).unlink()
    (art / fname).symlink_to(outside / fname)
    code, lines = _build_cli(capsys, art, tmp_path / "ds")
    assert code == 1 and lines[0].startswith(f"error: {art / fname}: $: a symlink to"), lines
    assert "outside" in lines[0] and not (tmp_path / "ds").exists()
    code, lines = _cli(capsys, "validate", art)
    assert code == 1 and any(line.startswith(f"{art / fname}: $: a symlink to") for line in lines), lines


def test_show_refuses_a_rollout_json_symlinked_outside_its_folder(art, tmp_path, capsys):
    outside = tmp_path / "elsewhere.json"
    (art / "rollout.json").rename(outside)
    (art / "rollout.json").symlink_to(outside)
    code, lines = _cli(capsys, "show", art)
    assert code == 1 and lines[0].startswith(f"error: {art / 'rollout.json'}: a symlink to"), lines


def test_a_symlink_inside_the_artifact_folder_is_followed(art, tmp_path, capsys):
    (art / "notes.md").write_bytes((art / "samples.md").read_bytes())
    (art / "samples.md").unlink()
    (art / "samples.md").symlink_to("notes.md")
    code, _ = _build_cli(capsys, art, tmp_path / "ds")
    assert code == 0


@pytest.mark.parametrize("tamper", ["edit", "delete", "reorder", "cut-tail"])
def test_a_tampered_trace_fails_the_build_naming_the_record(art, tmp_path, capsys, tamper):
    def change(doc):
        calls = doc["calls"]
        if tamper == "edit":
            calls[0]["response"] = {"edited": True}
        elif tamper == "delete":
            del calls[0]
        elif tamper == "reorder":
            calls[0], calls[1] = calls[1], calls[0]
        else:
            calls.pop()
    _edit(art / "trace.json", change)
    code, lines = _build_cli(capsys, art, tmp_path / "out")
    assert code == 1 and len(lines) == 1
    if tamper == "reorder":  # trace.json lists calls by arrival; its chain is followed link by link
        assert "trace.json" in lines[0] and "$.calls[1].index: is 0, not after the previous call's 1" in lines[0]
    else:
        assert "trace.json" in lines[0] and "$.calls[" in lines[0] and "trace integrity" in lines[0]
    assert not (tmp_path / "out").exists()


def test_validate_fails_a_folder_without_summary_json(art, capsys):
    (art / "summary.json").unlink()
    code, lines = _cli(capsys, "validate", art)
    assert code == 1
    assert any(line.startswith(f"{art / 'summary.json'}: $: missing") for line in lines), lines


def test_validate_still_checks_a_lone_trace_json_folder_on_its_own(art, tmp_path, capsys):
    (tmp_path / "traces").mkdir()
    shutil.copy(art / "trace.json", tmp_path / "traces" / "trace.json")
    code, lines = _cli(capsys, "validate", tmp_path / "traces")
    assert code == 0, lines


def test_build_refuses_an_out_folder_holding_other_files_and_touches_nothing(art, tmp_path, capsys):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("alias ll='ls -l'\n")
    (home / "thesis.tex").write_text("\\begin{document}\n")
    code, lines = _build_cli(capsys, art, home)
    assert code == 1 and len(lines) == 1
    assert str(home) in lines[0] and ".bashrc, thesis.tex" in lines[0] and "not a dataset built by" in lines[0]
    assert sorted(p.name for p in home.iterdir()) == [".bashrc", "thesis.tex"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "rollout"]


def test_build_refuses_an_out_that_is_a_file(art, tmp_path, capsys):
    (tmp_path / "ds").write_text("keep me")
    code, lines = _build_cli(capsys, art, tmp_path / "ds")
    assert code == 1 and "a file, not a dataset folder" in lines[0]
    assert (tmp_path / "ds").read_text() == "keep me"


def test_build_into_an_empty_folder_or_its_own_dataset_works(art, pristine, tmp_path):
    from rollout_dataset.builder import staging

    (tmp_path / "ds").mkdir()
    assert len(build([art], tmp_path / "ds", progress=False).added) == 1
    assert staging.is_built_dataset(tmp_path / "ds")
    write_synthetic_rollout(tmp_path / "more", seed=8, n_turns=2, context_tokens=64)
    result = build([tmp_path / "more"], tmp_path / "ds", progress=False)
    assert len(result.added) == 1 and result.total_rollouts == 2


def test_a_second_build_into_the_same_out_while_one_runs_is_refused(art, tmp_path):
    from rollout_dataset.builder import staging
    from rollout_dataset.errors import DatasetDirError

    with staging.locked_out_dir(tmp_path / "ds"):
        with pytest.raises(DatasetDirError, match="another build is writing to it"):
            build([art], tmp_path / "ds", progress=False)


def test_a_corrupt_shard_in_the_existing_dataset_is_named_and_nothing_changes(art, pristine, tmp_path, capsys):
    build([pristine], tmp_path / "ds", progress=False)
    shard = next((tmp_path / "ds" / "data" / "summary").glob("*.parquet"))
    shard.write_bytes(shard.read_bytes()[:-100])  # footerless, as an interrupted writer leaves it
    write_synthetic_rollout(tmp_path / "new", seed=9, n_turns=2, context_tokens=64)
    code, lines = _build_cli(capsys, tmp_path / "new", tmp_path / "ds")
    assert code == 1 and len(lines) == 1 and lines[0].startswith(f"error: {shard}: not a readable parquet shard")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "new", "rollout"]


def test_a_summary_json_that_is_a_fifo_is_refused_by_name_and_never_opened(art, tmp_path):
    """Planning which rollouts are already there reads summary.json before the folder is checked:
    a FIFO there must not be opened (a read would block the build forever)."""
    import os
    import subprocess
    import sys

    folder = tmp_path / "fifo"
    shutil.copytree(art, folder)
    (folder / "summary.json").unlink()
    os.mkfifo(folder / "summary.json")
    cli = [sys.executable, "-m", "rollout_dataset.cli", "build", str(folder), "--out", str(tmp_path / "ds"),
           "--no-progress"]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{folder / 'summary.json'}: $: not a regular file" in done.stderr
    assert not (tmp_path / "ds").exists()


def test_build_skip_invalid_leaves_out_a_refused_folder_and_names_it_on_stderr_and_the_card(pristine, tmp_path, capsys):
    inputs = tmp_path / "inputs"
    good, bad = inputs / "good", inputs / "bad"
    write_synthetic_rollout(good, seed=6, n_turns=2, context_tokens=64)
    shutil.copytree(pristine, bad)
    def ended_first(doc):  # the first two calls listed in the order they ended
        doc["calls"][0], doc["calls"][1] = doc["calls"][1], doc["calls"][0]

    _edit(bad / "trace.json", ended_first)
    code, lines = _cli(capsys, "build", inputs, "--out", tmp_path / "strict", "--no-progress")
    assert code == 1 and "--skip-invalid leaves such folders out instead" in lines[0]
    code = main(["build", str(inputs), "--out", str(tmp_path / "ds"), "--no-progress", "--skip-invalid"])
    captured = capsys.readouterr()
    assert code == 0
    assert [line for line in captured.err.splitlines() if line.startswith("refused: ")] == [
        f"refused: {bad}: left out of the dataset: {bad / 'trace.json'}: $.calls[1].index: is 0, not after the "
        "previous call's 1"]
    assert "1 rollouts (1 added, 0 already there, 1 refused by the schema check and left out)" in captured.out
    card = (tmp_path / "ds" / "README.md").read_text()
    assert card.count("**Left out:** 1 artifact folder(s) were refused by the schema check") == 1
    # the reason is Markdown-escaped text (`markdown_text`): it renders as the line stderr gave
    assert "- `bad`: bad/trace.json: \\$.calls\\[1\\].index: is 0, not after the previous call's 1" in card
    assert str(tmp_path) not in card  # no path of this machine on the card


def test_skip_invalid_is_refused_with_append(art, tmp_path, capsys):
    code, lines = _cli(capsys, "build", art, "--out", tmp_path / "ds", "--append", "--skip-invalid")
    assert code == 2 and lines == ["error: --skip-invalid works with a plain build, not with --append or --executor ray"]
