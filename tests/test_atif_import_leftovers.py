"""The ATIF import folder of a killed `build` (``<out>.atif-import-<pid>``) is removed by the next build.

`build` imports the ATIF trajectories among its inputs into ``<out>.atif-import-<pid>`` beside the
dataset, locked for as long as the build runs (`builder.staging.owned_folder`). A build killed with
SIGKILL leaves it unlocked; the next import or build beside the same dataset removes it and logs its
name, while the folder of a build still running (its lock held by a live process) is left alone;
SIGTERM removes it on the way out.
The killed build runs in a child process that stops at the `imported` checkpoint (after its first
trajectory is imported: no sleep to guess the moment) and is killed there.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from checkpoint_support import pausing_child, signal_when_paused
from rollout_dataset.atif.export import trajectory_of_folder
from support.synthetic_dataset import write_synthetic_rollout

# the child: `rollout-dataset build INPUTS --out OUT`, stopping after the first imported trajectory
CHILD = pausing_child("""
    from rollout_dataset.cli import main

    out, inputs = sys.argv[1], sys.argv[2:]
    pause_at("imported", 1)
    sys.exit(main(["build", *inputs, "--out", out, "--no-progress"]))
""")

# another process holding a folder's build lock until its stdin closes (what a running build holds)
HOLDER = """
import sys
from rollout_dataset.builder.staging import lock_folder

fd = lock_folder(sys.argv[1])
print("LOCKED", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def trajectories(tmp_path) -> Path:
    """Two bare ATIF files of distinct rollouts (a build imports them one after the other)."""
    folder = tmp_path / "trajectories"
    folder.mkdir()
    for seed in (1, 2):
        art = tmp_path / f"art{seed}"
        write_synthetic_rollout(art, seed=seed, n_turns=2, context_tokens=64)
        (folder / f"r{seed}.atif.json").write_text(json.dumps(trajectory_of_folder(art)), encoding="utf-8")
    return folder


def _build(inputs: list[Path], out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "build", *map(str, inputs), "--out", str(out),
                           "--no-progress"], capture_output=True, text=True, timeout=120)


def _rollouts(out: Path) -> int:
    return pq.read_table(out / "data" / "summary").num_rows


def test_a_build_killed_while_importing_leaves_an_import_folder_that_the_next_build_removes(tmp_path, trajectories):
    out = tmp_path / "ds"
    code = signal_when_paused(CHILD, [str(out), str(trajectories)], signal.SIGKILL)
    assert code == -signal.SIGKILL
    (leftover,) = tmp_path.glob("ds.atif-import-*")  # named after the dataset and the killed pid
    assert len(list(leftover.iterdir())) == 1  # killed with one trajectory imported

    proc = _build([trajectories], out)
    assert proc.returncode == 0, proc.stderr
    assert not leftover.exists()
    assert f"removed {leftover}, left by a killed build" in proc.stderr
    assert not list(tmp_path.glob("ds.atif-import-*")) and _rollouts(out) == 2


def test_sigterm_while_importing_removes_the_import_folder_on_the_way_out(tmp_path, trajectories):
    out = tmp_path / "ds"
    code = signal_when_paused(CHILD, [str(out), str(trajectories)], signal.SIGTERM)
    assert code == 128 + signal.SIGTERM
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art1", "art2", "trajectories"]


def test_a_build_of_artifact_folders_alone_removes_an_abandoned_import_folder(tmp_path, trajectories):
    out = tmp_path / "ds"
    code = signal_when_paused(CHILD, [str(out), str(trajectories)], signal.SIGKILL)
    assert code == -signal.SIGKILL
    (leftover,) = tmp_path.glob("ds.atif-import-*")

    proc = _build([tmp_path / "art1"], out)  # no ATIF input: nothing is imported
    assert proc.returncode == 0, proc.stderr
    assert not leftover.exists() and f"removed {leftover}" in proc.stderr
    assert _rollouts(out) == 1


def test_the_import_folder_of_a_running_build_is_left_alone(tmp_path, trajectories):
    out = tmp_path / "ds"
    running = tmp_path / "ds.atif-import-4194301"  # a pid that is, or is not, alive: the lock decides
    (running / "000000-in-progress").mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(running)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "LOCKED"
        proc = _build([trajectories], out)
        assert proc.returncode == 0, proc.stderr
        assert (running / "000000-in-progress").is_dir() and str(running) not in proc.stderr
        assert _rollouts(out) == 2
    finally:
        holder.stdin.close()  # the holder ends: its lock is dropped
        holder.wait(timeout=30)
        holder.stdout.close()
    proc = _build([trajectories], out)  # now abandoned: removed
    assert proc.returncode == 0, proc.stderr
    assert not running.exists() and f"removed {running}" in proc.stderr


def test_an_import_beside_the_dataset_removes_an_abandoned_import_folder_before_it_starts(tmp_path, trajectories,
                                                                                          caplog):
    from rollout_dataset.atif.importer import imported_inputs

    out = tmp_path / "ds"
    abandoned = tmp_path / "ds.atif-import-4194301"  # what a killed build leaves: no process holds its lock
    (abandoned / "000000-half").mkdir(parents=True)
    with caplog.at_level("INFO", logger="rollout_dataset.builder.staging"), \
            imported_inputs([trajectories], out) as inputs:
        assert not abandoned.exists()  # removed by the import itself, before any build
        (stage,) = inputs.paths
        assert Path(stage).parent == tmp_path and Path(stage).name.startswith("ds.atif-import-")
    assert f"removed {abandoned}" in caplog.text and not Path(stage).exists()


# a sweeper in another process: locks a folder, says so, removes it once told to, then lets the lock go
SWEEPER = """
import shutil, sys
from rollout_dataset.builder.staging import lock_folder

fd = lock_folder(sys.argv[1])
print("LOCKED", flush=True)
sys.stdin.readline()
shutil.rmtree(sys.argv[1])
"""


def test_an_import_folder_a_sweeper_is_removing_is_waited_for_and_made_again_with_mode_0700(tmp_path):
    import os
    import stat
    import threading

    from rollout_dataset.builder.staging import IMPORT_INFIX, owned_folder, sibling_folder

    out = tmp_path / "ds"
    ours = sibling_folder(out, IMPORT_INFIX)  # this process's name, held by another build's sweep
    ours.mkdir()
    sweeper = subprocess.Popen([sys.executable, "-c", SWEEPER, str(ours)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    finish = threading.Timer(0.3, lambda: (sweeper.stdin.write("go\n"), sweeper.stdin.flush()))
    try:
        assert sweeper.stdout.readline().strip() == "LOCKED"
        finish.start()
        with owned_folder(out, IMPORT_INFIX) as folder:  # waits out the sweep instead of failing
            assert folder == ours and folder.is_dir()
            assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700  # the trajectories are the owner's alone
    finally:
        finish.cancel()
        if finish.is_alive():
            finish.join()
        sweeper.stdin.close()
        sweeper.wait(timeout=30)
        sweeper.stdout.close()
    assert not ours.exists()
