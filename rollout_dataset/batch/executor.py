"""Run rollout jobs: on local threads (default) or as Ray tasks.

A job is one `(seed, rollout_idx)` with its artifact folder. The function that runs it, `run_one`,
is injected (the runner passes the capture-backed one; tests pass stand-ins), takes a `RolloutJob`
and returns a `RolloutResult`. Both executors wrap it in `execute_job`, which turns an exception
into a plain `JobError` so outcomes cross process boundaries, and both stop at once (queued jobs
cancelled) when `on_outcome` raises — that is how the runner's fail-fast guardrail works.

Ray: each job is a Ray task. The task writes the artifacts into a scratch folder on whichever node
runs it and returns their bytes; the driver writes them under the batch folder, so a multi-node
cluster needs no shared filesystem.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import traceback
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from rollout_dataset.rewards.results import RolloutResult
from rollout_dataset.errors import ConfigError
from rollout_dataset.files import folder_files
from rollout_dataset.files import write_folder_files as write_files  # the one definition; kept under this name

__all__ = [
    "RolloutJob",
    "RolloutResult",
    "JobError",
    "JobOutcome",
    "RunOne",
    "Executor",
    "LocalExecutor",
    "RayExecutor",
    "execute_job",
    "make_executor",
    "write_files",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RolloutJob:
    """One rollout to run.

    Attributes:
        seed: task-selection seed.
        rollout_idx: index of the rollout within the seed.
        rollout_id: deterministic id (32 hex) of this `(seed, rollout_idx)` in this batch.
        artifact_dir: where the rollout's artifacts go (`rollouts/<rollout_id>/`).
        settings: what `run_one` needs besides the job (base_url, model, max_turns, ...).
    """

    seed: int
    rollout_idx: int
    rollout_id: str
    artifact_dir: str
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JobError:
    """An exception of `run_one`, flattened so it can cross a process boundary.

    Attributes:
        type: the exception class name.
        message: `str(exception)`.
        status: HTTP status for `UpstreamStatusError`, else None.
        url: URL for `UpstreamStatusError`, else None.
        traceback: the formatted traceback (for the log).
    """

    type: str
    message: str
    status: int | None = None
    url: str | None = None
    traceback: str = ""


@dataclass
class JobOutcome:
    """The result or the error of one job (exactly one is set)."""

    job: RolloutJob
    result: RolloutResult | None = None
    error: JobError | None = None
    files: dict[str, bytes] | None = None


RunOne = Callable[[RolloutJob], RolloutResult]


def execute_job(run_one: RunOne, job: RolloutJob) -> JobOutcome:
    """Run one job, turning any exception into a `JobError`.

    Args:
        run_one: the rollout function.
        job: the job.

    Returns:
        The outcome.
    """
    try:
        result = run_one(job)
        if not isinstance(result, RolloutResult):
            raise TypeError(f"run_one returned {type(result).__name__}, expected RolloutResult")
        return JobOutcome(job, result=result)
    except Exception as exc:  # noqa: BLE001 - every failure becomes an outcome the driver judges
        return JobOutcome(
            job,
            error=JobError(
                type=type(exc).__name__,
                message=str(exc),
                status=getattr(exc, "status", None),
                url=getattr(exc, "url", None),
                traceback=traceback.format_exc(),
            ),
        )


class Executor(Protocol):
    """Runs jobs and hands each outcome to `on_outcome` in the calling thread."""

    def run(self, run_one: RunOne, jobs: Sequence[RolloutJob], on_outcome: Callable[[JobOutcome], None]) -> None:
        """Run every job; stop at once (cancel what has not started) when `on_outcome` raises."""
        ...


class LocalExecutor:
    """Threads in this process, at most `concurrency` jobs at once.

    Args:
        concurrency: jobs in flight.
    """

    def __init__(self, concurrency: int = 8) -> None:
        self.concurrency = max(1, int(concurrency))

    def run(self, run_one: RunOne, jobs: Sequence[RolloutJob], on_outcome: Callable[[JobOutcome], None]) -> None:
        """Run the jobs on a thread pool (see `Executor`).

        Raises:
            Exception: whatever `on_outcome` raised, after the queued jobs were cancelled.
        """
        if not jobs:
            return
        # Jobs are submitted only as slots free up, after the driver has judged the finished ones,
        # so a fatal outcome stops everything that has not started yet.
        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(jobs)), thread_name_prefix="rollout")
        queue = list(jobs)
        pending: set[Future] = set()
        try:
            while queue or pending:
                while queue and len(pending) < self.concurrency:
                    pending.add(pool.submit(execute_job, run_one, queue.pop(0)))
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    on_outcome(fut.result())
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)


def _ray_job(run_one: RunOne, job: RolloutJob) -> JobOutcome:
    """Body of one Ray task: run into a scratch folder, return the outcome and the files' bytes."""
    scratch = Path(tempfile.mkdtemp(prefix=f"rollout-{job.rollout_id}-"))
    try:
        local_job = RolloutJob(job.seed, job.rollout_idx, job.rollout_id, str(scratch), dict(job.settings))
        outcome = execute_job(run_one, local_job)
        outcome.job = job
        outcome.files = folder_files(scratch)
        return outcome
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class RayExecutor:
    """Each job a Ray task; the driver writes the returned artifacts.

    Connects to `RAY_ADDRESS` when set (ray.init reads it), else starts a local instance with
    `num_cpus` CPUs, no dashboard; shuts it down afterwards only if it started it.

    Args:
        concurrency: tasks in flight.
        num_cpus: CPUs of a local instance (default: `concurrency`).
    """

    def __init__(self, concurrency: int = 8, num_cpus: int | None = None) -> None:
        self.concurrency = max(1, int(concurrency))
        self.num_cpus = num_cpus

    def run(self, run_one: RunOne, jobs: Sequence[RolloutJob], on_outcome: Callable[[JobOutcome], None]) -> None:
        """Run the jobs as Ray tasks (see `Executor`).

        Raises:
            ConfigError: Ray is not installed (`pip install 'rollout-dataset[ray]'`).
            Exception: whatever `on_outcome` raised, after the pending tasks were cancelled.
        """
        if not jobs:
            return
        try:
            import ray
        except ImportError:
            raise ConfigError(
                "--executor ray needs Ray: pip install 'rollout-dataset[ray]' (or pip install ray)"
            ) from None
        started = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if not os.environ.get("RAY_ADDRESS"):
                kwargs["num_cpus"] = self.num_cpus or self.concurrency
            ray.init(**kwargs)
            started = True
        remote = ray.remote(num_cpus=1, max_retries=0)(_ray_job)
        queue = list(jobs)
        pending: list[Any] = []
        try:
            while queue or pending:
                while queue and len(pending) < self.concurrency:
                    pending.append(remote.remote(run_one, queue.pop(0)))
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    outcome: JobOutcome = ray.get(ref)
                    if outcome.files:
                        write_files(Path(outcome.job.artifact_dir), outcome.files)
                    outcome.files = None
                    on_outcome(outcome)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        finally:
            if started:
                ray.shutdown()


def make_executor(name: str, concurrency: int) -> Executor:
    """The executor called `name` (`local` or `ray`).

    Raises:
        ConfigError: an unknown name.
    """
    if name == "local":
        return LocalExecutor(concurrency)
    if name == "ray":
        return RayExecutor(concurrency)
    raise ConfigError(f"executor: {name!r} is not one of local, ray")

