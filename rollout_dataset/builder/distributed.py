"""Building one dataset from artifact folders spread over a Ray cluster (`build --executor ray`).

Each Ray task runs the ordinary `build` on its share of the artifact folders, on the node that
holds them, into a scratch folder there, and returns the part's files as bytes (shards, the
trace-viewer sessions, the tokenizer: the same shipping as the batch's Ray executor, so the cluster
needs no shared file system; the bytes travel through Ray's object store, one part per task, so a
part should stay well under a node's object-store memory — use more parts for more data). The
driver writes each part into the staging folder of the dataset as it arrives, then merges the
parts in part order with the same primitive as `build --append` (`builder.merge.merge_part`:
one tokenizer, each rollout once — first occurrence wins — shards moved in under new names), renders
the card over the whole dataset and swaps it into place atomically (`builder.staging`). The result
is the dataset a local `build` of the same folders in the same order writes, row for row (only
the shard files differ: one per part and config). A failed part stops the build and leaves the
dataset folder as it was. Publishing is `hub.push` on the result: one Hub commit with
``parent_commit``, retried on conflict (the CLI does it with ``PUSH_TO_DATASET``).

Where the folders are:

- ``artifact_dirs`` visible to the driver and the workers at the same paths (a shared file system,
  or a single machine): the driver lists the artifact folders and splits them, in order, into
  `parts` contiguous shares;
- ``node_dirs={node_id: [paths...]}``: folders that only a given node holds; one task per node,
  pinned there (`NodeAffinitySchedulingStrategy`, not soft), which finds the artifact folders itself.

Folders the driver sees whose ``summary.json`` names a rollout the dataset already holds are not
built again (as `build --append` skips them); a rerun of the same build changes nothing.

Ray is the optional extra ``rollout-dataset[ray]``. The driver connects to ``RAY_ADDRESS`` when set
(ray.init reads it), else starts a local instance with `num_cpus` CPUs (default: the number of
parts) and shuts it down at the end, as the batch's executor does.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from rollout_dataset import errors
from rollout_dataset.builder import staging
from rollout_dataset.builder.build import BuildResult, build
from rollout_dataset.builder.card_info import CardOptions
from rollout_dataset.builder.configs import CONFIG_NAMES
from rollout_dataset.builder.inputs import find_artifact_dirs
from rollout_dataset.builder.merge import PARTS_DIR, BuiltPart, adding_to, merge_parts
from rollout_dataset.builder.rows import PREVIEW_CHARS, SAMPLES_MODES
from rollout_dataset.builder.writer import ROW_GROUP_BYTES
from rollout_dataset.errors import ConfigError, DistributedBuildError, SchemaValidationError
from rollout_dataset.files import folder_files, write_folder_files

__all__ = ["BuildPart", "plan_parts", "split_folders", "build_part", "build_on_ray"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuildPart:
    """One Ray task's share of a distributed build.

    Attributes:
        paths: artifact folders, or folders holding them, as the worker sees them.
        node_id: the Ray node that must run the task (the one holding `paths`); None: any node.
    """

    paths: tuple[str, ...]
    node_id: str | None = None


def plan_parts(artifact_dirs: Iterable[str | Path], parts: int) -> list[BuildPart]:
    """Split artifact folders the driver can see into `parts` contiguous, order-keeping shares.

    Args:
        artifact_dirs: artifact folders, or folders holding them.
        parts: how many shares (at most one per artifact folder).

    Returns:
        The parts, in input order (sizes differ by at most one folder).

    Raises:
        ArtifactError: an input is not a folder or holds no artifact folder.
        ConfigError: `parts` < 1.
    """
    return split_folders([str(f.absolute()) for f in find_artifact_dirs(artifact_dirs)], parts)


def split_folders(folders: Sequence[str], parts: int) -> list[BuildPart]:
    """Split artifact folders, in order, into at most `parts` contiguous parts (see `plan_parts`).

    Args:
        folders: artifact folders (absolute paths: the workers run in another folder).
        parts: how many parts.

    Returns:
        The parts (none when there is no folder).

    Raises:
        ConfigError: `parts` < 1.
    """
    if parts < 1:
        raise ConfigError(f"parts={parts}: must be >= 1")
    if not folders:
        return []
    parts = min(parts, len(folders))
    size, extra = divmod(len(folders), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(BuildPart(tuple(folders[start:end])))
        start = end
    return out


def build_part(paths: Sequence[str], settings: dict[str, Any]) -> dict[str, Any]:
    """The body of one Ray task: `build` the paths into a scratch folder and return its files.

    Args:
        paths: the part's artifact folders (or folders holding them).
        settings: `build` keyword arguments (samples, preview_chars, row_group_bytes).

    Returns:
        ``{"files": {relative path: bytes}, "added", "skipped", "cut_cells", "node"}``, or, when the
        build failed, ``{"error": class name, "message", "failures", "node"}`` (errors cross the
        process boundary as plain data).
    """
    node = _node_id()
    scratch = Path(tempfile.mkdtemp(prefix="rollout-build-part-"))
    try:
        result = build(list(paths), scratch / "part", progress=False, **settings)
        files = {rel: data for rel, data in folder_files(scratch / "part").items() if rel != "README.md"}
        return {"files": files, "added": result.added, "skipped": result.skipped, "cut_cells": result.cut_cells,
                "node": node}
    except (errors.RolloutDatasetError, OSError) as exc:
        failures = exc.failures if isinstance(exc, SchemaValidationError) else None
        return {"error": type(exc).__name__, "message": str(exc), "failures": failures, "node": node}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _node_id() -> str | None:
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - outside Ray (tests call build_part directly)
        return None


def _part_error(index: int, part: BuildPart, reply: dict[str, Any]) -> Exception:
    """The exception the driver raises for a part that failed on its worker (same class when ours)."""
    where = f"part {index} ({', '.join(part.paths[:3])}{' ...' if len(part.paths) > 3 else ''}) on node {reply.get('node')}"
    if reply["error"] == "SchemaValidationError" and reply.get("failures"):
        return SchemaValidationError([tuple(f) for f in reply["failures"]])
    cls = getattr(errors, reply["error"], None)
    if isinstance(cls, type) and issubclass(cls, errors.RolloutDatasetError):
        try:
            return cls(f"{where}: {reply['message']}")
        except TypeError:  # an error class with its own fields: reported as a failed part
            pass
    return DistributedBuildError(f"{where}: {reply['error']}: {reply['message']}")


def build_on_ray(artifact_dirs: Iterable[str | Path], out_dir: str | Path, *, parts: int | None = None,
                 node_dirs: Mapping[str, Sequence[str | Path]] | None = None, num_cpus: int | None = None,
                 template: str | Path | None = None, options: CardOptions | None = None, progress: bool = False,
                 row_group_bytes: int = ROW_GROUP_BYTES, samples: str = "preview",
                 preview_chars: int = PREVIEW_CHARS) -> BuildResult:
    """Build (or extend) a dataset folder from artifact folders, one Ray task per part.

    Args:
        artifact_dirs: artifact folders (or folders of them) the driver and workers see at the same paths.
        out_dir: the dataset folder: new, empty, or a dataset this tool built (rollouts already in it
            are skipped), as for `build`.
        parts: how many tasks share `artifact_dirs` (default: the cluster's CPUs, at most one per folder).
        node_dirs: node id -> paths only that node holds (one task per node, pinned to it).
        num_cpus: CPUs of a local Ray instance started here (default: the number of tasks).
        template: the card template.
        options: the card options (default: those `build` uses by default).
        progress: log each part as it lands.
        row_group_bytes: see `build`.
        samples: see `build`.
        preview_chars: see `build`.

    Returns:
        A `BuildResult` over the whole build (`added` in part order).

    Raises:
        ConfigError: Ray is not installed, no folders were given, or bad `samples`/`parts`.
        SchemaValidationError, TokenizerMismatchError, ArtifactError: as `build` (raised for the
            first failed part; nothing is kept).
        DistributedBuildError: a part's task died or failed otherwise (part, folders, node named).
        DatasetDirError: as `build`.
    """
    if samples not in SAMPLES_MODES:
        raise ConfigError(f"samples={samples!r}: valid modes are {', '.join(SAMPLES_MODES)}")
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError:
        raise ConfigError("--executor ray needs Ray: pip install 'rollout-dataset[ray]' (or pip install ray)") from None
    artifact_dirs = list(artifact_dirs)
    pinned = [BuildPart(tuple(str(p) for p in paths), node) for node, paths in (node_dirs or {}).items() if paths]
    if not artifact_dirs and not pinned:
        raise ConfigError("nothing to build: give artifact folders or node_dirs")
    if parts is not None and parts < 1:
        raise ConfigError(f"parts={parts}: must be >= 1")
    folders = [str(f.absolute()) for f in find_artifact_dirs(artifact_dirs)] if artifact_dirs else []
    out = Path(out_dir).absolute()
    staging.check_out_dir(out)
    settings = {"samples": samples, "preview_chars": preview_chars, "row_group_bytes": row_group_bytes}
    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if not os.environ.get("RAY_ADDRESS"):
            kwargs["num_cpus"] = num_cpus or parts or os.cpu_count() or 1
        previous = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
        ray.init(**kwargs)
        started = True
        if previous is not None:  # Ray's driver handler exits with 15; ours (staging.terminate_raises) cleans
            signal.signal(signal.SIGTERM, previous)  # up and exits 143 as `build` does; Ray is shut down below
    try:
        n = parts or max(1, int(ray.cluster_resources().get("CPU", 1)))
        return _build(ray, NodeAffinitySchedulingStrategy, folders, n, pinned, out, Path(out_dir), settings,
                      template, options or CardOptions(), progress)
    finally:
        if started:
            ray.shutdown()


def _build(ray: Any, affinity: Any, folders: list[str], n: int, pinned: list[BuildPart], out: Path, given: Path,
           settings: dict[str, Any], template: str | Path | None, options: CardOptions,
           progress: bool) -> BuildResult:
    result = BuildResult(out_dir=given, rows={c: 0 for c in CONFIG_NAMES})
    remote = ray.remote(num_cpus=1, max_retries=0)(build_part)
    with adding_to(out, folders, staging.check_out_dir) as seen:
        # what the driver sees: rollouts already there are not built again
        result.skipped.extend(rid for _, rid in seen.there)
        plan = split_folders(seen.todo, n) + pinned
        if not plan:
            result.total_rollouts = len(seen.present)
            log.info("%s: every rollout given is already there; nothing built", out)
            return result
        with staging.staged(out) as stage:
            refs = {}
            for i, part in enumerate(plan):
                task = remote.options(scheduling_strategy=affinity(part.node_id, soft=False)) if part.node_id else remote
                refs[task.remote(list(part.paths), settings)] = i
            replies: dict[int, dict[str, Any]] = {}
            pending = list(refs)
            try:
                while pending:
                    done, pending = ray.wait(pending, num_returns=1, timeout=1.0)  # SIGTERM is handled between waits
                    if not done:
                        continue
                    i = refs[done[0]]
                    try:
                        reply = ray.get(done[0])
                    except ray.exceptions.RayError as exc:
                        raise DistributedBuildError(f"part {i} ({', '.join(plan[i].paths[:3])}): the Ray task "
                                                    f"failed: {type(exc).__name__}: {exc}") from None
                    if "error" in reply:
                        raise _part_error(i, plan[i], reply)
                    try:
                        write_folder_files(stage / PARTS_DIR / str(i), reply.pop("files"))
                    except ValueError as exc:  # a path leaving the part's folder: never written
                        raise DistributedBuildError(f"part {i} from node {reply.get('node')}: {exc}") from None
                    replies[i] = reply
                    if progress:
                        log.info("part %d/%d built on node %s: %d rollout(s)", len(replies), len(plan),
                                 reply.get("node"), len(reply["added"]))
                    staging.checkpoint("part")
            except BaseException:
                for ref in pending:
                    ray.cancel(ref, force=True)
                raise
            built = [BuiltPart(stage / PARTS_DIR / str(i), f"part {i} ({', '.join(plan[i].paths[:3])})",
                               replies[i]["added"], replies[i]["skipped"], replies[i]["cut_cells"])
                     for i in range(len(plan))]
            merge_parts(stage, out, seen.present, built, result, options, template=template)
    result.readme = given / "README.md"
    log.info("built %s on Ray from %d part(s): %d rollouts added, %d skipped, %d in total", out, len(plan),
             len(result.added), len(result.skipped), result.total_rollouts)
    return result
