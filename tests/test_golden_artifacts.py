"""Same seeds, same artifacts: each golden capture, run again through the CLI, writes exactly the
fixture's files, byte for byte after masking run-to-run noise (ids, times, durations, ports, temp
paths, git sha, digests over those; `tests/golden_support.py` lists every rule and its reason).

The fixtures were generated from main before issue 11's refactor (one capture pipeline behind an
Environment seam); that refactor must not change a byte of them. Regenerate them
(`tests/data/golden/regenerate.py`) only for an intended artifact change.
"""

from __future__ import annotations

import pytest

from golden_support import CAPTURES, compare_with_fixture


def _assert_reproduces_fixture(name, tmp_path, monkeypatch):
    monkeypatch.delenv("PUSH_TO_DATASET", raising=False)
    capture = CAPTURES[name]
    out = tmp_path / name
    capture.produce(out)
    problems = compare_with_fixture(capture, out)
    assert not problems, (
        f"{name} ({capture.description}) no longer matches tests/data/golden/{name} "
        f"({len(problems)} difference(s)):\n  " + "\n  ".join(problems)
        + "\nRegenerate (tests/data/golden/regenerate.py) only if this artifact change is intended."
    )


def test_coding_oracle_capture_writes_the_same_artifacts_as_before(tmp_path, monkeypatch):
    _assert_reproduces_fixture("coding_oracle", tmp_path, monkeypatch)


def test_coding_capture_with_an_external_cmd_harness_writes_the_same_artifacts_as_before(tmp_path, monkeypatch):
    _assert_reproduces_fixture("coding_cmd_harness", tmp_path, monkeypatch)


def test_crafter_scripted_capture_writes_the_same_artifacts_as_before(tmp_path, monkeypatch):
    _assert_reproduces_fixture("crafter_scripted", tmp_path, monkeypatch)


def test_smoke_batch_writes_the_same_rollouts_and_batch_documents_as_before(tmp_path, monkeypatch):
    _assert_reproduces_fixture("batch_smoke", tmp_path, monkeypatch)


def test_every_golden_capture_has_a_test():
    assert set(CAPTURES) == {"coding_oracle", "coding_cmd_harness", "crafter_scripted", "batch_smoke"}, (
        "a new golden capture needs its own test above"
    )


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_every_golden_fixture_is_committed(name):
    capture = CAPTURES[name]
    assert capture.listing_file.is_file() and any(capture.fixture_dir.rglob("*.json")), (
        f"missing fixture {capture.fixture_dir}: run tests/data/golden/regenerate.py {name}"
    )
