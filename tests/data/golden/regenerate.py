"""Write the golden artifact fixtures that `tests/test_golden_artifacts.py` compares against.

What they are: the masked artifacts of a few captures with fixed seeds (`tests/golden_support.py`,
`CAPTURES`): a coding capture (local backend, oracle policy, built-in harness), a Crafter capture
(local backend, scripted player) and `rollout-dataset batch --smoke` (per-rollout folders plus the
batch documents and the dataset card). Each capture writes `<name>/` (every file compared by
content, masked) and `<name>.files.txt` (every file written, masked path, including the ones
compared by name only: plots, parquet shards, the tokenizer copy).

When to regenerate: ONLY when a change to the artifacts is intended (a new field, a changed
default, a fixed bug in what is recorded), and say so in the commit message. A refactor that
should not change what is written (issue 11: one capture pipeline behind an Environment seam)
must pass the test against the fixtures as they are; regenerating to make it pass would throw the
safety net away. Review `git diff tests/data/golden` after regenerating: every changed line
should be one you meant.

How (from the repository root, with the project's venv; the fixtures were first written from
main at b7a7924):

    PYTHONPATH=$PWD .venv/bin/python tests/data/golden/regenerate.py            # all captures
    PYTHONPATH=$PWD .venv/bin/python tests/data/golden/regenerate.py coding_oracle   # one of them

It runs each capture twice and refuses to write a fixture when the two masked runs differ (a new
source of run-to-run noise: add a masking rule in `tests/golden_support.py`, with its reason).
Needs the allow-list sandbox (bubblewrap), as `capture` and `batch` do; never pushes.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for golden_support

from golden_support import CAPTURES, compare_runs, write_fixture  # noqa: E402


def regenerate(names: list[str]) -> int:
    """Produce each named capture twice, check the masked runs agree, write its fixture.

    Args:
        names: capture names (keys of `CAPTURES`); empty means all.

    Returns:
        The process exit code: 0 when every fixture was written, 1 when a capture is not reproducible,
        2 for an unknown name.
    """
    unknown = [name for name in names if name not in CAPTURES]
    if unknown:
        print(f"unknown capture(s) {unknown}; known: {sorted(CAPTURES)}", file=sys.stderr)
        return 2
    for name in names or list(CAPTURES):
        capture = CAPTURES[name]
        with tempfile.TemporaryDirectory(prefix=f"golden-{name}-") as tmp:
            first, second = Path(tmp) / "first", Path(tmp) / "second"
            capture.produce(first)
            capture.produce(second)
            noise = compare_runs(first, second)
            if noise:
                print(f"{name}: two runs with the same seeds differ after masking; fixture not written:",
                      *noise, sep="\n  ", file=sys.stderr)
                return 1
            write_fixture(capture, first)
        print(f"{name}: wrote {capture.fixture_dir} and {capture.listing_file.name}")
    return 0


if __name__ == "__main__":
    sys.exit(regenerate(sys.argv[1:]))
