"""Shared fixtures: the local vLLM-compatible backend on 127.0.0.1, port 0.

- `builtin_tokenizer`: the shipped tokenizer (loaded once per session).
- `local_backend`: an async `LocalBackend` with the `echo` policy (stopped after the test).
- `local_backend_thread`: the same, served from a background thread, for sync tests.
- `start_local_backend`: an async factory, `await start_local_backend(policy="script", script=...)`,
  for any other configuration; every backend it starts is stopped after the test.

Each test session gets a `datasets` cache of its own (`HF_DATASETS_CACHE`, removed at exit), set
before anything imports `datasets`: the user's cache is shared across sessions (its entries are named
by the dataset folder's name, `ds`, `dataset`, ...), and a test reads only what its own session built.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest

if "HF_DATASETS_CACHE" not in os.environ:
    _DATASETS_CACHE = tempfile.mkdtemp(prefix="rollout-dataset-tests-datasets-")
    os.environ["HF_DATASETS_CACHE"] = _DATASETS_CACHE
    atexit.register(shutil.rmtree, _DATASETS_CACHE, ignore_errors=True)


def _harbor_lock(tmp_path_factory, operation: int):
    """Holds the run's Harbor lock (a file beside every pytest-xdist worker's temporary folder, so all the
    run's workers share it) for the test: `fcntl.LOCK_EX` alone, `fcntl.LOCK_SH` beside other holders."""
    import fcntl

    lock = tmp_path_factory.getbasetemp().parent / "harbor-environments.lock"
    with open(lock, "a") as handle:
        fcntl.flock(handle, operation)
        yield


@pytest.fixture
def harbor_alone(tmp_path_factory):
    """Runs the test while no other test of this run (in any pytest-xdist worker) runs a Harbor environment.

    For a test that checks the whole machine for environment roots and marked processes left behind
    (tests/test_harbor.py): another worker's Harbor run would show up there.
    """
    import fcntl

    yield from _harbor_lock(tmp_path_factory, fcntl.LOCK_EX)


@pytest.fixture
def harbor_environment(request, tmp_path_factory):
    """Runs a test that builds Harbor environments beside others that do, but never beside a `harbor_alone` one.

    A test that takes both is covered by `harbor_alone`'s lock (a second lock of the same file would wait for
    the first).
    """
    import fcntl

    if "harbor_alone" in request.fixturenames:
        yield
        return
    yield from _harbor_lock(tmp_path_factory, fcntl.LOCK_SH)


@pytest.fixture(scope="session")
def builtin_tokenizer():
    from rollout_dataset.tokenizers import load_tokenizer

    return load_tokenizer("builtin")


@pytest.fixture
async def start_local_backend():
    from rollout_dataset.backend import LocalBackend

    started = []

    async def start(**kwargs):
        backend = LocalBackend(**kwargs)
        await backend.start()
        started.append(backend)
        return backend

    yield start
    for backend in started:
        await backend.stop()


@pytest.fixture
async def local_backend(start_local_backend):
    return await start_local_backend(policy="echo")


@pytest.fixture
def local_backend_thread():
    from rollout_dataset.backend import run_backend_in_thread

    with run_backend_in_thread(policy="echo") as backend:
        yield backend


# The viewer's demo rollouts and dataset, built once per session (tests/viewer_fixtures.py).
from viewer_fixtures import (  # noqa: E402,F401
    audited_tree, crafter_tree, demo_folders, hostile_tree, logprobs_missing_tree, oddity_tree, rollout_text_tree)


#: the test files that run longest (a full run's `--durations`, loaded machine: each 100-300 s), in the order
#: the pytest-xdist workers take them: first, so that the run never ends with one worker still inside one of
#: them while the other has nothing left; test_harbor.py's machine-wide checks (`harbor_alone`) overlap no other
#: Harbor file's start. `make test` passes --no-loadscope-reorder, else xdist hands out files by test count.
_LONGEST_FILES = ("test_harbor.py", "test_harbor_podman.py", "test_build_ray.py", "test_reasoning_harnesses.py",
                  "test_publish.py", "test_context_fit_capture.py", "test_compact.py", "test_harbor_hostile.py",
                  "test_third_env.py")


def pytest_collection_modifyitems(items):
    """Orders the test files: `_LONGEST_FILES` first, then the rest by their number of tests, most first (as
    xdist's own reordering does); a file's tests keep their order."""
    counts: dict[object, int] = {}
    for item in items:
        counts[item.path] = counts.get(item.path, 0) + 1
    rank = {name: n for n, name in enumerate(_LONGEST_FILES)}
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), -counts[item.path], str(item.path)))
