"""A sealed proxy session (the online loop's: calls through the proxy, reward posted to its session API)
as an artifact folder that `validate` checks and `build` turns into rows.

The records are read as the session API read them (`proxy.session_views.read_settled`, checked
against the seal), exported by the same `export_rollout` with the same tokenizer, so the folder's
`sequences` rows equal what `GET /sessions/{id}/sequences` served; the posted reward becomes
``env_reward`` (and ``reward_after_penalties``: no penalty is applied). The reward's metadata may
name ``env``, ``task_id``, ``dataset_seed``, ``harness`` and ``instruction`` (the row's ``group_id`` is
``<env>:<task_id>:<dataset_seed>``, so a GRPO group's sessions share it); the rest is kept in
``task.json``'s config under ``reward_metadata``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from pathlib import Path
from typing import Any

from rollout_dataset.artifact_files import SUMMARY_FILE, TRAJECTORY_FILE
from rollout_dataset.documents import RolloutCounts, rollout_files, samples_text, summary_document
from rollout_dataset.envs.base import Score, TaskInfo
from rollout_dataset.errors import ConfigError
from rollout_dataset.export import capture_level_of, export_rollout, turns_document
from rollout_dataset.proxy.redact import valid_session_id
from rollout_dataset.proxy.session_state import SessionFiles
from rollout_dataset.proxy.session_views import read_settled
from rollout_dataset.trace_integrity import TraceSeal

__all__ = ["session_documents", "write_session_artifacts", "session_rollout_id", "ONLINE_ENV"]

#: the environment name of a session whose reward metadata names none.
ONLINE_ENV = "online"


def _text(metadata: dict[str, Any], key: str, default: str) -> str:
    value = metadata.get(key)
    return value if isinstance(value, str) and value else default


def session_rollout_id(session: str) -> str:
    """The rollout id of a session's artifact folder: the id itself when it is 32 hex digits (a uuid4's
    ``.hex``, as the online recipe names sessions), else the first 32 hex digits of its SHA-256.

    Args:
        session: the session id.

    Returns:
        32 lower-case hex digits.
    """
    if len(session) == 32 and all(c in "0123456789abcdef" for c in session):
        return session
    return hashlib.sha256(session.encode()).hexdigest()[:32]


def _model(records: list[dict[str, Any]]) -> str:
    for record in records:
        request = record.get("request")
        if isinstance(request, dict) and isinstance(request.get("model"), str) and request["model"]:
            return str(request["model"])
    return "unknown"


def session_documents(trace_dir: str | Path, session: str, tokenizer: str | None = None) -> dict[str, Any]:
    """The artifact documents of one sealed session (file name -> document or text).

    Args:
        trace_dir: the proxy's trace directory.
        session: the session id.
        tokenizer: the tokenizer (name or path) the proxy's session API used (``--session-api-tokenizer``),
            for the same findings; it is named in ``task.json`` so the dataset carries it. None: none.

    Returns:
        file name -> a dict (``.json``) or text, `summary.json` and `trajectory.json` included.

    Raises:
        ConfigError: an invalid id, or a session that is not sealed (its calls are not final).
        TraceIntegrityError: the trace file does not hold exactly what was sealed.
    """
    from rollout_dataset.atif.export import trajectory_document

    if not valid_session_id(session):
        raise ConfigError(f"invalid session id {session[:200]!r}: use 1-128 letters, digits, '.', '_' or '-'")
    files = SessionFiles(trace_dir)
    seal_doc = files.seal(session)
    if seal_doc is None:
        raise ConfigError(f"session {session!r} in {trace_dir} is not sealed (POST /sessions/{session}/seal): "
                          "its calls are not final")
    seal = TraceSeal(int(seal_doc["records"]), seal_doc.get("head_sha256"))
    records = read_settled(files.trace_path(session), seal)
    reward_doc = files.reward(session) or {}
    reward = reward_doc.get("reward")
    given = reward_doc.get("metadata")
    metadata: dict[str, Any] = given if isinstance(given, dict) else {}
    level = capture_level_of(records)
    loaded = None
    if tokenizer:
        from rollout_dataset.tokenizers import load_tokenizer

        loaded = load_tokenizer(tokenizer)
    document = export_rollout(records, session_id=session, capture_level=level, tokenizer=loaded)
    turns = turns_document(document, records)
    seed = metadata.get("dataset_seed")
    task_id = _text(metadata, "task_id", session)
    task = TaskInfo(env=_text(metadata, "env", ONLINE_ENV), task_id=task_id, task_index=0, title=task_id,
                    instruction=_text(metadata, "instruction", f"online session {session}"), source="session-api",
                    dataset_seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else 0,
                    rollout_seed=0, n_prompts=1,
                    config={"session": session, "reward_metadata": metadata, "tokenizer": tokenizer})
    started = min((r["started_at"] for r in records if isinstance(r.get("started_at"), (int, float))),
                  default=float(seal_doc.get("sealed_at") or 0))
    created_at = _dt.datetime.fromtimestamp(started, _dt.timezone.utc).replace(microsecond=0).isoformat()
    summary = summary_document(
        rollout_id=session_rollout_id(session), created_at=created_at.replace("+00:00", "Z"), task=task, model=_model(records),
        harness=_text(metadata, "harness", "unknown"), counts=RolloutCounts.of(records, document, turns),
        score=Score(env_reward=reward, reward_after_penalties=reward), timed_out=False,
        stop_reason="session_sealed", capture_level=level, timings={}, errors=[],
        extra={"continuity": document.get("continuity")})
    trace = {"schema_version": 1, "session": session, "seal": seal.to_dict(), "calls": records}
    samples = samples_text(document, records, loaded, {"rollout": session_rollout_id(session), "reward": reward})
    out = rollout_files(trace=trace, document=document, turns=turns, task=task, samples=samples)
    out[SUMMARY_FILE] = summary
    out[TRAJECTORY_FILE] = trajectory_document(records, document, summary, out["task.json"])
    return out


def write_session_artifacts(trace_dir: str | Path, session: str, out_dir: str | Path,
                            tokenizer: str | None = None) -> Path:
    """Write one sealed session as an artifact folder (then `validate` and `build` take it).

    Args:
        trace_dir: the proxy's trace directory.
        session: the session id.
        out_dir: the folder to write (created; files in it are replaced).
        tokenizer: as `session_documents`.

    Returns:
        `out_dir`.

    Raises:
        ConfigError, TraceIntegrityError: as `session_documents`.
        OSError: a file could not be written.
    """
    from rollout_dataset.files import write_text_atomic

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, content in session_documents(trace_dir, session, tokenizer).items():
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, indent=1) + "\n"
        write_text_atomic(out / name, text)
    return out
