"""Pure planning of Hub commits: where a dataset's files go in a repo and which ones a commit touches.

Nothing here makes a request or touches a file: each function takes what was read (the repo's
file listing with sizes, the local file names) and answers with paths, counts or groups, so the
I/O modules (`rollout_dataset.hub.dataset_push`, `rollout_dataset.hub.trace_sessions`,
`rollout_dataset.hub.remote_compaction`) only read, call these, write and commit. A repo's layout:

- ``data/<config>/<shard>.parquet``: the parquet shards of each config (`CONFIG_NAMES`);
- ``README.md``: the dataset card; ``tokenizer/``: the stored tokenizer;
- in the companion trace-viewer repo, ``sessions/<rollout id>.jsonl``.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from rollout_dataset.builder.compaction import plan_merges
from rollout_dataset.builder.configs import CONFIG_NAMES
from rollout_dataset.builder.traces import SESSIONS_DIR

__all__ = ["CARD_PATH", "shard_path", "repo_file_sizes", "config_shards", "config_bytes", "shard_counts",
           "sessions_to_add", "session_path", "merge_groups", "over_shard_limit", "default_traces_repo"]

CARD_PATH = "README.md"


def shard_path(config: str, name: str) -> str:
    """The path in a repo of a config's shard.

    Args:
        config: the config name.
        name: the shard's file name.

    Returns:
        ``data/<config>/<name>``.
    """
    return f"data/{config}/{name}"


def _is_shard(path: str, config: str) -> bool:
    return path.startswith(f"data/{config}/") and path.endswith(".parquet")


def repo_file_sizes(info: Any) -> dict[str, int]:
    """Every file of a repo info and its size (0 when the info was read without file sizes).

    Args:
        info: a ``huggingface_hub.DatasetInfo``.

    Returns:
        ``{path: bytes}``.
    """
    return {s.rfilename: int(getattr(s, "size", None) or 0) for s in (info.siblings or [])}


def config_shards(files: Mapping[str, int] | Iterable[str], config: str) -> list[str]:
    """A config's shard paths among a repo's files, in name (so time) order.

    Args:
        files: the repo's paths (or ``{path: bytes}``).
        config: the config name.

    Returns:
        The sorted shard paths.
    """
    return sorted(p for p in files if _is_shard(p, config))


def config_bytes(files: Mapping[str, int]) -> dict[str, int]:
    """Parquet bytes per config.

    Args:
        files: ``{path: bytes}`` of a repo.

    Returns:
        ``{config: bytes}`` for every config (0 for a config without shards).
    """
    return {c: sum(files[p] for p in config_shards(files, c)) for c in CONFIG_NAMES}


def shard_counts(files: Iterable[str]) -> dict[str, int]:
    """Shards per config.

    Args:
        files: a repo's paths.

    Returns:
        ``{config: shards}`` for every config.
    """
    paths = list(files)
    return {c: len(config_shards(paths, c)) for c in CONFIG_NAMES}


def over_shard_limit(files: Iterable[str], limit: int) -> int | None:
    """The largest shard count of a config when it is above `limit` (the repo is worth compacting).

    Args:
        files: a repo's paths.
        limit: the most shards a config may hold; 0 never asks for compaction.

    Returns:
        That count, or None when no config is above `limit` (or `limit` is 0).
    """
    most = max(shard_counts(files).values())
    return most if limit and most > limit else None


def merge_groups(files: Mapping[str, int], target_bytes: int) -> dict[str, list[list[str]]]:
    """How a remote compaction groups each config's shards (`rollout_dataset.builder.compaction.plan_merges`).

    Args:
        files: ``{path: bytes}`` of a repo.
        target_bytes: the size goal of a merged shard.

    Returns:
        ``{config: groups}``, each group a run of shard paths in order (one path: left as it is).

    Raises:
        ValueError: `target_bytes` is not positive.
    """
    out = {}
    for config in CONFIG_NAMES:
        shards = config_shards(files, config)
        out[config] = [[shards[i] for i in group] for group in plan_merges([files[p] for p in shards], target_bytes)]
    return out


def default_traces_repo(repo_id: str) -> str:
    """The companion repo of a dataset repo: ``<repo>-traces``.

    Args:
        repo_id: the dataset repo.

    Returns:
        The companion repo's id.
    """
    return f"{repo_id}-traces"


def session_path(name: str) -> str:
    """The path in the companion repo of a session file.

    Args:
        name: the file name (``<rollout id>.jsonl``).

    Returns:
        ``sessions/<name>``.
    """
    return f"{SESSIONS_DIR}/{name}"


def sessions_to_add(local_names: Sequence[str], remote_files: Iterable[str]) -> tuple[list[str], int]:
    """The local session files the companion repo lacks (a session's name is its rollout id: never changes).

    Args:
        local_names: the session file names of the dataset folder.
        remote_files: the companion repo's paths.

    Returns:
        ``(names to upload in the given order, sessions the repo holds after the upload)``.
    """
    remote = {p for p in remote_files if p.startswith(f"{SESSIONS_DIR}/") and p.endswith(".jsonl")}
    new = [n for n in local_names if session_path(n) not in remote]
    return new, len(remote) + len(new)
