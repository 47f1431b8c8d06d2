"""Orchestrate a batch: plan seeds x rollouts, run what is not finished, score, summarise, guard.

Layout under the batch folder (`BatchConfig.out_dir`):

    batch.json                     batch id (fixes the rollout ids) and creation time
    rollouts/<rollout_id>/         the artifacts of each rollout, plus batch_result.json (done marker)
    runs/<strategy>.jsonl          one run record per finished rollout (schema `run_record`)
    summary/summary.json           aggregates per strategy (schema `batch_summary`)
    summary/stats_by_seed.json     per-seed aggregates (schema `batch_stats_by_seed`)
    summary/config_snapshot.json   arguments, step-reward block, timestamp, git SHA / version
    plots/*.png                    histogram, scatter (with r), ECDF per strategy
    report.md                      the human-readable report
    dataset/                       the built dataset (pushed to `push_repo` when given)
    .push-staging/                 scratch of `--push-every` stream pushes (rollout_dataset.batch.streaming)

Resume: a rollout's id is a uuid5 of the batch id and `(seed, rollout_idx)`, so the same folder
maps each job to the same `rollouts/<id>/`; one holding `batch_result.json` is finished and
skipped, any other is wiped and redone.

The function that runs one rollout is injected (`run_one(job) -> RolloutResult`); by default the
environment's runner from `rollout_dataset.batch.job_runner` (the coding capture) is used. Step rewards
are computed here from the achievement timeline the rollout returns, for every strategy at once,
so `simple` and `complex` are compared on the very same rollouts.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from tqdm import tqdm

from rollout_dataset.artifact_files import ROLLOUT_FILE, SUMMARY_FILE
from rollout_dataset.batch import report as _report
from rollout_dataset.batch import stats
from rollout_dataset.batch.config import BatchConfig
from rollout_dataset.batch.executor import Executor, JobOutcome, RolloutJob, RolloutResult, RunOne, make_executor
from rollout_dataset.batch.plots import write_plots
from rollout_dataset.rewards.stepwise import stepwise_for_rollout, timeline_to_json
from rollout_dataset.capture.artifacts import utc_now
from rollout_dataset.files import write_text_atomic
from rollout_dataset.errors import DatasetDirError, GuardrailError, UpstreamError, UpstreamStatusError
from rollout_dataset.proxy.redact import redact_url, redact_urls_in_text
from rollout_dataset.schema import validate

__all__ = [
    "RESULT_FILE",
    "BatchResult",
    "run_batch",
    "plan_jobs",
    "rollout_id_for",
    "check_turns",
    "redact_url",
    "utc_now",
]

log = logging.getLogger(__name__)

RESULT_FILE = "batch_result.json"
ERROR_FILE = "batch_error.json"
_BATCH_FILE = "batch.json"


def _write_json(path: Path, doc: Any, *, fsync: bool = False) -> None:
    """Write JSON atomically (temp file + rename), so a crash never leaves half a file; `fsync` for a
    file a resume trusts (batch.json, a rollout's done marker), so a power loss cannot empty it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(doc, indent=2, sort_keys=False) + "\n", fsync=fsync)


def _read_json(path: Path) -> Any | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def rollout_id_for(batch_id: str, seed: int, rollout_idx: int) -> str:
    """The deterministic rollout id (32 hex) of `(seed, rollout_idx)` in a batch."""
    return uuid.uuid5(uuid.UUID(batch_id), f"{seed}/{rollout_idx}").hex


def _check_out_dir(out_dir: Path) -> None:
    """Refuse an --out that holds something other than a batch (a batch writes only where it may resume).

    Raises:
        DatasetDirError: `out_dir` is a non-empty folder without the batch's own `batch.json`.
    """
    if out_dir.is_dir() and not (out_dir / _BATCH_FILE).is_file() and any(out_dir.iterdir()):
        raise DatasetDirError(f"{out_dir}: not empty and not a batch's folder (no {_BATCH_FILE}); give a new or "
                              "empty --out, or the folder of the batch to resume")


def _batch_id(out_dir: Path) -> str:
    """The batch id of `out_dir`'s `batch.json`; a new one (written, fsynced) when there is none.

    Every rollout id derives from it, so a batch.json that exists but holds no valid id is refused:
    a fresh id would orphan every finished rollout (a resume would run them all again, and
    `dataset/` would hold only the new ones).

    Raises:
        DatasetDirError: batch.json exists but is unreadable or holds no valid `batch_id`.
    """
    path = out_dir / _BATCH_FILE
    if path.exists():
        doc = _read_json(path)
        raw = doc.get("batch_id") if isinstance(doc, dict) else None
        try:
            return uuid.UUID(raw).hex if isinstance(raw, str) else _no_batch_id(path, doc)
        except ValueError:
            return _no_batch_id(path, doc)
    batch_id = uuid.uuid4().hex
    _write_json(path, {"schema_version": 1, "batch_id": batch_id, "created_at": utc_now()}, fsync=True)
    return batch_id


def _no_batch_id(path: Path, doc: Any) -> str:
    what = "not a JSON object" if not isinstance(doc, dict) else f"batch_id {doc.get('batch_id')!r} is not a uuid"
    raise DatasetDirError(f"{path}: {what}; every rollout id of the batch derives from its batch_id, so the batch "
                          "cannot resume without it: restore the file, or give a new --out")


def _settings(config: BatchConfig, base_url: str | None) -> dict[str, Any]:
    return {
        "base_url": base_url,
        "model": config.model,
        "max_turns": config.max_turns,
        "tasks": config.tasks,
        "n_prompts": config.n_prompts,
        "timeout_s": config.timeout_s,
        "env": config.env,
        "env_options": dict(config.env_options),
        "local_backend": config.base_url is None,
        "on_policy": config.on_policy,
        "max_tokens_cap": config.max_tokens_cap,
        "fit_context": config.fit_context,
        # held-out isolation: every rollout's sandbox hides the folder of all rollouts of the batch
        "hide_paths": [str((config.out_dir / "rollouts").resolve())],
        "unsafe_sandbox": config.unsafe_sandbox,
        "trust_env": config.trust_env,
        "more_upstreams": list(config.more_upstreams),
    }


def plan_jobs(config: BatchConfig, batch_id: str, base_url: str | None = None) -> list[RolloutJob]:
    """Every `(seed, rollout_idx)` job of the batch, seeds in the given order.

    Args:
        config: the batch configuration.
        batch_id: the batch id (32 hex) from `batch.json`.
        base_url: the inference URL the rollouts use.

    Returns:
        The jobs, each with its deterministic id and artifact folder.
    """
    settings = _settings(config, base_url)
    jobs = []
    for seed in config.seeds:
        for idx in range(config.rollouts_per_seed):
            rid = rollout_id_for(batch_id, seed, idx)
            jobs.append(RolloutJob(seed, idx, rid, str(config.out_dir / "rollouts" / rid), dict(settings)))
    return jobs


def _finished(job: RolloutJob) -> dict[str, Any] | None:
    """The rollout's result document, or None when it is not finished (its folder is then deleted and it runs again)."""
    path = Path(job.artifact_dir) / RESULT_FILE
    doc = _read_json(path)
    if isinstance(doc, dict) and doc.get("rollout_id") == job.rollout_id:
        return doc
    if path.exists():  # its capture may be complete: never deleted without a word
        log.warning("%s: unreadable; its rollout is deleted and run again", path)
    return None


def _result_document(job: RolloutJob, result: RolloutResult, config: BatchConfig) -> dict[str, Any]:
    stepwise = {}
    for strategy in config.strategies:
        decisions, totals = stepwise_for_rollout(
            result.timeline, config.step_rewards.with_strategy(strategy), initial=result.initial
        )
        stepwise[strategy] = {"decisions": decisions, "totals": totals}
    return {
        "schema_version": 1,
        "rollout_id": job.rollout_id,
        "seed": job.seed,
        "rollout_idx": job.rollout_idx,
        "task_id": result.task_id,
        "model": result.model,
        "final_return": None if result.final_return is None else float(result.final_return),
        "num_steps": int(result.num_steps),
        "tool_calls_total": int(result.tool_calls_total),
        "initial": sorted(result.initial),
        "timeline": timeline_to_json(result.timeline),
        "stepwise": stepwise,
        "finished_at": utc_now(),
        "extra": result.extra,
    }


def _annotate_artifacts(folder: Path, doc: Mapping[str, Any], strategies: Sequence[str]) -> None:
    """Put the step rewards into the rollout's own documents, when the rollout wrote them.

    `summary.json` gets `stepwise {indicator_sum, reward_sum, new_achievements_total, strategy}` of
    the first strategy; `rollout.json` gets `metadata.stepwise` with every strategy's per-decision
    records and totals.
    """
    first = doc["stepwise"].get(strategies[0], {})
    summary = _read_json(folder / SUMMARY_FILE)
    if isinstance(summary, dict) and first.get("totals") is not None:
        summary["stepwise"] = {**first["totals"], "strategy": strategies[0]}
        _write_json(folder / SUMMARY_FILE, summary)
    rollout = _read_json(folder / ROLLOUT_FILE)
    if isinstance(rollout, dict) and isinstance(rollout.get("metadata", {}), dict):
        rollout.setdefault("metadata", {})["stepwise"] = {
            "timeline": doc["timeline"],
            **{s: doc["stepwise"][s] for s in strategies},
        }
        _write_json(folder / ROLLOUT_FILE, rollout)


def _run_record(doc: Mapping[str, Any], strategy: str, config: BatchConfig) -> dict[str, Any]:
    totals = doc["stepwise"][strategy]["totals"] or {"indicator_sum": 0.0, "reward_sum": 0.0, "new_achievements_total": 0}
    meta: dict[str, Any] = {"base_url": redact_url(config.base_url)}
    if strategy == "simple":
        meta["indicator_lambda"] = config.step_rewards.indicator_lambda
    else:
        meta["weights"] = dict(config.step_rewards.weights)
        meta["k_limits"] = dict(config.step_rewards.k_limits)
    return {
        "seed": doc["seed"],
        "rollout_idx": doc["rollout_idx"],
        "rollout_id": doc["rollout_id"],
        "task_id": doc.get("task_id"),
        "strategy": strategy,
        "final_return": doc["final_return"],
        "step_reward_sum": float(totals["reward_sum"]),
        "step_indicator_sum": float(totals["indicator_sum"]),
        "new_achievements_total": int(totals["new_achievements_total"]),
        "num_steps": doc["num_steps"],
        "tool_calls_total": doc["tool_calls_total"],
        "model": doc.get("model") or config.model,
        "max_turns": config.max_turns,
        "timestamp": doc["finished_at"],
        "meta": meta,
    }


def _strategy_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    final = [r["final_return"] for r in records]
    step = [r["step_reward_sum"] for r in records]
    xs, _ = stats.paired(step, final)
    return {
        "n": len(records),
        "n_pairs": int(xs.size),
        "final_return": stats.describe(final),
        "step_reward_sum": stats.describe(step),
        "step_indicator_sum": stats.describe(r["step_indicator_sum"] for r in records),
        "new_achievements_total": stats.describe(r["new_achievements_total"] for r in records),
        "pearson_step_vs_final": stats.pearson(step, final),
        "spearman_step_vs_final": stats.spearman(step, final),
    }


def _stats_by_seed(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    out: dict[str, list[dict[str, Any]]] = {}
    for strategy, records in runs.items():
        by_seed: dict[int, list[Mapping[str, Any]]] = {}
        for r in records:
            by_seed.setdefault(r["seed"], []).append(r)
        rows: list[dict[str, Any]] = []
        for seed, rs in by_seed.items():
            rows.append(
                {
                    "seed": seed,
                    "task_id": rs[0].get("task_id"),
                    "n": len(rs),
                    "final_return": stats.describe(r["final_return"] for r in rs),
                    "step_reward_sum": stats.describe(r["step_reward_sum"] for r in rs),
                    "step_indicator_sum": stats.describe(r["step_indicator_sum"] for r in rs),
                }
            )
        rows.sort(key=lambda row: (row["final_return"]["mean"] is None, -(row["final_return"]["mean"] or 0.0), row["seed"]))
        out[strategy] = rows
    return {"schema_version": 1, "strategies": out}


def _version_info() -> dict[str, Any]:
    from rollout_dataset._version import __version__

    sha = None
    try:
        proc = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        if proc.returncode == 0:
            sha = proc.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    return {"package_version": __version__, "git_sha": sha}


def check_turns(turns: Sequence[int]) -> None:
    """The zero-turn guardrail.

    Args:
        turns: agent turns of every finished rollout.

    Raises:
        GuardrailError: the mean is 0, or more than half the rollouts had 0 turns.
    """
    if not turns:
        return
    zero = sum(1 for t in turns if t == 0)
    mean = sum(turns) / len(turns)
    hint = "check --base-url, --model and the model server's log"
    if mean == 0:
        raise GuardrailError(f"guardrail: mean agent turns is 0 over {len(turns)} rollouts (the agent never acted); {hint}")
    if zero * 2 > len(turns):
        raise GuardrailError(
            f"guardrail: {zero} of {len(turns)} rollouts had 0 agent turns (more than half); {hint}"
        )


@dataclass
class BatchResult:
    """What a batch produced.

    Attributes:
        out_dir: the batch folder.
        planned: jobs in the plan.
        ran: rollouts run by this call.
        skipped: finished rollouts found and kept (resume).
        failed: `(rollout_id, message)` of rollouts that raised (to be redone on the next run).
        runs: strategy -> run records.
        summary: the summary document.
        dataset_dir: the built dataset, if built.
        pushed: what the push helper returned, if it pushed.
        stream_pushes: what each `push_every` stream push returned, in order.
    """

    out_dir: Path
    planned: int
    ran: int = 0
    skipped: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    dataset_dir: Path | None = None
    pushed: Any = None
    stream_pushes: list[Any] = field(default_factory=list)


@contextlib.contextmanager
def _no_server(config: BatchConfig) -> Iterator[str | None]:
    yield config.base_url


_RESUME_KEYS = ("env", "env_options", "model", "base_url", "max_turns", "tasks", "n_prompts", "timeout_s",
                "on_policy")


def _warn_on_changed_settings(config: BatchConfig) -> None:
    """On resume, say which rollout-shaping settings differ from the earlier run's snapshot."""
    previous = _read_json(config.out_dir / "summary" / "config_snapshot.json")
    if not isinstance(previous, dict):
        return
    before = previous.get("config") or {}
    now = {**config.snapshot(), "base_url": redact_url(config.base_url)}
    changed = [k for k in _RESUME_KEYS if k in before and before[k] != now.get(k)]
    if changed:
        log.warning(
            "%s: resuming with different %s than the finished rollouts used (%s); they are kept as they are",
            config.out_dir,
            ", ".join(changed),
            ", ".join(f"{k}: {before[k]!r} -> {now.get(k)!r}" for k in changed),
        )


def run_batch(config: BatchConfig, run_one: RunOne | None = None, *, executor: Executor | None = None) -> BatchResult:
    """Run (or resume) a batch and write every output.

    Args:
        config: the batch configuration.
        run_one: runs one rollout (default: the environment's capture runner; without
            `config.base_url` it is pointed at a local backend started for the batch).
        executor: overrides `config.executor` (tests).

    Returns:
        What was run, skipped and written.

    Raises:
        UpstreamStatusError: a rollout's model server answered 4xx/5xx (the batch stops at once).
        UpstreamError: the model server could not be reached (the batch stops at once).
        GuardrailError: no agent turns (mean 0 or more than half at 0), or some rollouts failed;
            the outputs are written first, the dataset is not built.
        ConfigError: an invalid configuration.
        DatasetDirError: `config.out_dir` is a non-empty folder that is not a batch's, or another
            batch is running in it.
    """
    out = config.out_dir
    _check_out_dir(out)
    out.mkdir(parents=True, exist_ok=True)
    lock = _lock_batch_dir(out)
    try:
        return _run_locked(config, run_one, executor)
    finally:
        os.close(lock)


def _lock_batch_dir(out: Path) -> int:
    """Take the batch folder's exclusive lock (the kernel drops it when the process ends, kill -9 included).

    Two batches in one folder would each delete and re-run the rollouts the other has in flight
    (a resume re-runs every unfinished rollout into the same folder), mixing their files.

    Returns:
        The open fd holding the lock (close it to release).

    Raises:
        DatasetDirError: another batch holds it.
    """
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DatasetDirError(f"{out}: another batch is running in it; wait for it to finish (or stop it), then "
                              "run again to resume") from None
    return fd


def _run_locked(config: BatchConfig, run_one: RunOne | None, executor: Executor | None) -> BatchResult:
    """`run_batch` once the batch folder's lock is held."""
    out = config.out_dir
    batch_id = _batch_id(out)
    _warn_on_changed_settings(config)
    if run_one is None:
        from rollout_dataset.batch.job_runner import env_runner

        server_cm, run_one = env_runner(config)
    else:
        server_cm = _no_server(config)

    result = BatchResult(out_dir=out, planned=0)
    docs: dict[str, dict[str, Any]] = {}
    streamer = _streamer(config)
    with server_cm as base_url:
        jobs = plan_jobs(config, batch_id, base_url)
        result.planned = len(jobs)
        todo = []
        for job in jobs:
            doc = _finished(job)
            if doc is not None:
                docs[job.rollout_id] = doc
            else:
                shutil.rmtree(job.artifact_dir, ignore_errors=True)
                todo.append(job)
        result.skipped = len(docs)
        if docs:
            log.info("resuming %s: %d of %d rollouts already finished", out, len(docs), len(jobs))

        bar = tqdm(total=len(jobs), initial=len(docs), desc="rollouts", unit="rollout", disable=not config.progress)

        def on_outcome(outcome: JobOutcome) -> None:
            job = outcome.job
            folder = Path(job.artifact_dir)
            if outcome.error is not None:
                err = outcome.error
                if err.type == "UpstreamStatusError" and err.status is not None:
                    # redact_url gives None for None only: a string in, a string out
                    raise UpstreamStatusError(int(err.status), redact_url(err.url or str(job.settings.get("base_url"))) or "",
                                              redact_urls_in_text(err.message or ""))
                if err.type == "UpstreamError":  # the model server cannot be reached: no rollout can succeed
                    raise UpstreamError(err.message)
                log.error("rollout seed=%s idx=%s failed: %s: %s\n%s", job.seed, job.rollout_idx, err.type, err.message, err.traceback)
                _write_json(folder / ERROR_FILE, {"type": err.type, "message": err.message, "at": utc_now()})
                result.failed.append((job.rollout_id, f"{err.type}: {err.message}"))
            else:
                assert outcome.result is not None
                doc = _result_document(job, outcome.result, config)
                _annotate_artifacts(folder, doc, config.strategies)
                (folder / ERROR_FILE).unlink(missing_ok=True)
                _write_json(folder / RESULT_FILE, doc, fsync=True)  # the done marker
                docs[job.rollout_id] = doc
                result.ran += 1
                if streamer is not None:
                    streamer.add(folder)
            bar.update(1)

        try:
            (executor or make_executor(config.executor, config.concurrency)).run(run_one, todo, on_outcome)
        finally:
            bar.close()
        if streamer is not None:
            streamer.flush()
            result.stream_pushes = streamer.pushes

    finished = [docs[j.rollout_id] for j in jobs if j.rollout_id in docs]
    runs = {s: [_run_record(d, s, config) for d in finished] for s in config.strategies}
    _write_outputs(config, runs, finished, result, base_url)
    check_turns([d["num_steps"] for d in finished])
    if result.failed:
        raise GuardrailError(
            f"{len(result.failed)} of {result.planned} rollouts failed (first: {result.failed[0][1]}); "
            f"outputs cover the {len(finished)} finished; run the same command again to redo the failed ones"
        )
    if config.build_dataset and finished:
        result.dataset_dir, result.pushed = _build_dataset(
            out, [Path(j.artifact_dir) for j in jobs if j.rollout_id in docs], progress=config.progress,
            config=config,
        )
    return result


def _streamer(config: BatchConfig) -> Any:
    """The `StreamingPusher` of a batch with `push_every`, else None."""
    if not (config.push_every and config.push_repo):
        return None
    from rollout_dataset.batch.streaming import StreamingPusher

    return StreamingPusher(config.out_dir, config.push_repo, config.push_every, private=config.push_private)


def _write_outputs(
    config: BatchConfig,
    runs: dict[str, list[dict[str, Any]]],
    finished: list[dict[str, Any]],
    result: BatchResult,
    base_url: str | None,
) -> None:
    out = config.out_dir
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    for strategy, records in runs.items():
        for record in records:
            validate(record, "run_record")
        write_text_atomic(runs_dir / f"{strategy}.jsonl", "".join(json.dumps(r, sort_keys=False) + "\n" for r in records))

    models = sorted({model for d in finished if (model := d.get("model"))} | ({config.model} if config.model else set()))
    turns = [d["num_steps"] for d in finished]
    summary = {
        "schema_version": 1,
        "created_at": utc_now(),
        "model": ", ".join(models) if models else None,
        "counts": {
            "seeds": len(config.seeds),
            "rollouts_per_seed": config.rollouts_per_seed,
            "rollouts_planned": result.planned,
            "rollouts_finished": len(finished),
            "rollouts_scored": sum(1 for d in finished if d["final_return"] is not None),
            "zero_turn_rollouts": sum(1 for t in turns if t == 0),
        },
        "turns": stats.describe(turns),
        "strategies": {s: _strategy_summary(records) for s, records in runs.items()},
    }
    validate(summary, "batch_summary")
    by_seed = _stats_by_seed(runs)
    validate(by_seed, "batch_stats_by_seed")
    snapshot = {
        "schema_version": 1,
        "created_at": summary["created_at"],
        "config": {
            **config.snapshot(),
            "base_url": redact_url(config.base_url),
            "argv": [redact_urls_in_text(a) for a in (config.argv or [])],
        },
        "inference_url": redact_url(base_url),
        "weights": dict(config.step_rewards.weights),
        "k_limits": dict(config.step_rewards.k_limits),
        **_version_info(),
    }
    _write_json(out / "summary" / SUMMARY_FILE, summary)
    _write_json(out / "summary" / "stats_by_seed.json", by_seed)
    _write_json(out / "summary" / "config_snapshot.json", snapshot)
    plots = write_plots(runs, out / "plots")
    text = _report.render_report(summary=summary, stats_by_seed=by_seed, snapshot=snapshot, plots=plots, out_dir=out)
    write_text_atomic(out / "report.md", text)
    result.runs = runs
    result.summary = summary


def _build_dataset(out: Path, artifact_dirs: list[Path], *, progress: bool,
                   config: BatchConfig | None = None) -> tuple[Path | None, Any]:
    """Build `dataset/` from the rollout folders that hold capture artifacts; push if asked
    (to `config.push_repo` when given; the push skips rollouts already there)."""
    dirs = [d for d in artifact_dirs if (d / SUMMARY_FILE).is_file()]
    if not dirs:
        log.info("no capture artifacts under %s/rollouts; dataset not built", out)
        return None, None
    try:
        from rollout_dataset.builder import build
    except ImportError as exc:  # the builder is optional at this layer
        log.warning("dataset not built: rollout_dataset.builder unavailable (%s)", exc)
        return None, None
    dataset_dir = out / "dataset"
    if dataset_dir.exists():
        shutil.rmtree(dataset_dir)
    build(dirs, dataset_dir, progress=progress)
    if config is None or not config.push_repo:
        return dataset_dir, None
    from rollout_dataset.hub import push

    return dataset_dir, push(dataset_dir, config.push_repo, private=config.push_private)
