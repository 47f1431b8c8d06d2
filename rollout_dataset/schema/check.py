"""Validate artifact files, artifact folders and trees of them: JSON Schema plus semantic checks.

`validate_path(path)` is what `rollout-dataset validate` and `capture` run. It finds every file it
knows by name (see `FILE_SCHEMAS`), checks it against its shipped schema, then runs the checks a
schema cannot express:

- `turns.json`: `n_prompt_ids`/`n_output_ids` equal the array lengths, the mask length equals
  prompt + output ids (zeros then ones), the logprob count equals the output id count;
- `trace.json`: every call is a valid trace record, indices strictly increase, the records' hash
  chain (``prev_sha256``) is unbroken and agrees with the proxy's ``seal`` (see
  `rollout_dataset.trace_integrity`);
- an artifact folder (`summary.json` plus another artifact file): every artifact file is present, and the
  summary's counts agree with the trace, the turns and the held-out tests (captured calls, agent
  and trained turns, tool calls by name and in total, held-out count, reward = passed / total,
  the same task id everywhere).

Each failure is a `(file, json_path, reason)` triple, printed as ``file: json.path: reason``.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from rollout_dataset.errors import SchemaValidationError
from rollout_dataset.schema import SCHEMA_NAMES, schema_errors
from rollout_dataset.trace_integrity import SEAL_FIELD, TraceSeal, chain_failures

__all__ = [
    "ARTIFACT_FILES",
    "FILE_SCHEMAS",
    "JSONL_SCHEMAS",
    "PLACED_SCHEMAS",
    "Failure",
    "check_artifact_dir",
    "check_document",
    "format_failure",
    "validate_path",
    "raise_for_failures",
]

logger = logging.getLogger(__name__)

Failure = tuple[str, str, str]

#: file name -> schema name, for the JSON documents of an artifact folder.
FILE_SCHEMAS: dict[str, str] = {
    "trace.json": "trace",
    "rollout.json": "rollout",
    "turns.json": "turns",
    "task.json": "task",
    "held_out_tests.json": "held_out_tests",
    "summary.json": "summary",
}

#: (parent folder name, file name) -> schema name, for a batch's outputs (checked when shipped).
PLACED_SCHEMAS: dict[tuple[str, str], str] = {
    ("summary", "summary.json"): "batch_summary",
    ("summary", "stats_by_seed.json"): "batch_stats_by_seed",
}

#: parent folder name -> schema of each line, for JSON Lines files (a batch's `runs/<strategy>.jsonl`).
JSONL_SCHEMAS: dict[str, str] = {"runs": "run_record"}

#: every file an artifact folder written by `capture` holds.
ARTIFACT_FILES: tuple[str, ...] = (
    "trace.json",
    "rollout.json",
    "turns.json",
    "task.json",
    "visible_tests.txt",
    "held_out_tests.json",
    "summary.json",
    "samples.md",
)


def format_failure(failure: Failure) -> str:
    """Render one failure as ``file: json.path: reason``.

    Args:
        failure: a `(file, json_path, reason)` triple.

    Returns:
        The printable line.
    """
    file, path, reason = failure
    return f"{file}: {path}: {reason}"


def raise_for_failures(failures: Iterable[Failure]) -> None:
    """Raise `SchemaValidationError` if there is any failure.

    Args:
        failures: `(file, json_path, reason)` triples.

    Raises:
        SchemaValidationError: listing every failure.
    """
    failures = list(failures)
    if failures:
        raise SchemaValidationError(failures)


def _schema_for(path: Path) -> str | None:
    return FILE_SCHEMAS.get(path.name)


def _load_json(path: Path) -> tuple[Any, list[Failure]]:
    try:
        return json.loads(path.read_text(encoding="utf-8")), []
    except UnicodeDecodeError as exc:
        return None, [(str(path), "$", f"not UTF-8 text: {exc}")]
    except json.JSONDecodeError as exc:
        return None, [(str(path), "$", f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")]
    except OSError as exc:
        return None, [(str(path), "$", f"cannot read: {exc}")]


def _check_turns(doc: dict) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    turns = doc.get("turns") if isinstance(doc, dict) else None
    if not isinstance(turns, list):
        return out
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            continue
        base = f"$.turns[{i}]"
        prompt = turn.get("prompt_ids")
        output = turn.get("output_ids")
        if not isinstance(prompt, list) or not isinstance(output, list):
            continue
        if turn.get("n_prompt_ids") is not None and turn["n_prompt_ids"] != len(prompt):
            out.append((f"{base}.n_prompt_ids", f"is {turn['n_prompt_ids']} but prompt_ids has {len(prompt)} ids"))
        if turn.get("n_output_ids") is not None and turn["n_output_ids"] != len(output):
            out.append((f"{base}.n_output_ids", f"is {turn['n_output_ids']} but output_ids has {len(output)} ids"))
        mask = turn.get("mask")
        if isinstance(mask, list):
            if len(mask) != len(prompt) + len(output):
                out.append((f"{base}.mask", f"has {len(mask)} entries but prompt + output ids = "
                                            f"{len(prompt)} + {len(output)} = {len(prompt) + len(output)}"))
            elif mask != [0] * len(prompt) + [1] * len(output):
                first = next(j for j, (a, b) in enumerate(zip(mask, [0] * len(prompt) + [1] * len(output))) if a != b)
                out.append((f"{base}.mask[{first}]", "mask must be 0 on the prompt ids and 1 on the output ids"))
        logps = turn.get("per_token_logps")
        if isinstance(logps, list) and len(logps) != len(output):
            out.append((f"{base}.per_token_logps", f"has {len(logps)} logprobs but output_ids has {len(output)} ids"))
        if isinstance(logps, list):
            for j, value in enumerate(logps):
                if isinstance(value, (int, float)) and (math.isnan(value) or value > 0):
                    out.append((f"{base}.per_token_logps[{j}]", f"log-probability {value} is not in (-inf, 0]"))
                    break
    return out


def _check_trace(doc: dict) -> list[tuple[str, str]]:
    """Arrival order and tamper evidence (the schema checks the records themselves).

    Each call's index comes after the previous one's; the records' hash chain is unbroken and,
    when the proxy's seal is there, the calls are exactly the records it wrote.
    """
    out: list[tuple[str, str]] = []
    calls = doc.get("calls") if isinstance(doc, dict) else None
    if not isinstance(calls, list):
        return out
    seal = None
    if SEAL_FIELD in doc:
        try:
            seal = TraceSeal.from_dict(doc[SEAL_FIELD])
        except ValueError as exc:
            out.append((f"$.{SEAL_FIELD}", str(exc)))
    for position, reason in chain_failures(calls, seal):
        out.append((f"$.calls[{position}]", f"trace integrity: {reason}"))
    last = -1
    for i, call in enumerate(calls):
        index = call.get("index") if isinstance(call, dict) else None
        if isinstance(index, int):
            if index <= last:
                out.append((f"$.calls[{i}].index", f"is {index}, not after the previous call's {last}"))
            last = index
    return out


def _check_rollout(doc: dict) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    sequences = doc.get("sequences") if isinstance(doc, dict) else None
    if not isinstance(sequences, list):
        return out
    for i, seq in enumerate(sequences):
        if not isinstance(seq, dict):
            continue
        ids, mask, logps = seq.get("input_ids"), seq.get("loss_mask"), seq.get("logprobs")
        if isinstance(ids, list) and isinstance(mask, list) and len(mask) != len(ids):
            out.append((f"$.sequences[{i}].loss_mask", f"has {len(mask)} entries but input_ids has {len(ids)}"))
        if isinstance(ids, list) and isinstance(logps, list) and len(logps) != len(ids):
            out.append((f"$.sequences[{i}].logprobs", f"has {len(logps)} entries but input_ids has {len(ids)}"))
    return out


_CONDENSE_MIN = 8


def _condensed(value: Any) -> Any:
    """A copy for schema checking where long homogeneous int (or float) arrays keep one element.

    Token-id and logprob arrays are most of a rollout's bytes; checking each element's type through
    jsonschema costs seconds on a long rollout. An array whose elements all have the same type
    (`int`, or `float`) is checked as its first element: its type is the only thing the schemas
    say about it. Mixed arrays are kept whole, so a stray element is reported at its own index.
    """
    if isinstance(value, dict):
        return {k: _condensed(v) for k, v in value.items()}
    if isinstance(value, list):
        if len(value) >= _CONDENSE_MIN:
            kind = type(value[0])
            if kind in (int, float) and all(type(x) is kind for x in value):
                return value[:1]
        return [_condensed(v) for v in value]
    return value


_SEMANTIC = {"turns": _check_turns, "trace": _check_trace, "rollout": _check_rollout}


def check_document(document: Any, schema_name: str, file: str = "<document>") -> list[Failure]:
    """Check one parsed document against its schema and its semantic rules.

    Args:
        document: the parsed JSON document.
        schema_name: the schema to use (e.g. ``"turns"``).
        file: the name to report failures under.

    Returns:
        `(file, json_path, reason)` triples; empty when the document is valid.
    """
    failures: list[Failure] = []
    if schema_name in SCHEMA_NAMES:
        failures.extend((file, p, r) for p, r in schema_errors(_condensed(document), schema_name))
    else:
        logger.debug("schema %r is not shipped; only semantic checks for %s", schema_name, file)
    semantic = _SEMANTIC.get(schema_name)
    if semantic is not None:
        failures.extend((file, p, r) for p, r in semantic(document))
    return failures


def _check_file(path: Path) -> tuple[list[Failure], Any]:
    name = _schema_for(path)
    if name is None:
        return [], None
    doc, failures = _load_json(path)
    if failures:
        return failures, None
    return check_document(doc, name, str(path)), doc


def _cross_checks(folder: Path, docs: dict[str, Any]) -> list[Failure]:
    out: list[Failure] = []
    summary = docs.get("summary.json")
    if not isinstance(summary, dict):
        return out
    sfile = str(folder / "summary.json")

    def want(field: str, expected: Any, why: str) -> None:
        if field in summary and summary[field] != expected:
            out.append((sfile, f"$.{field}", f"is {summary[field]!r} but {why} gives {expected!r}"))

    trace = docs.get("trace.json")
    if isinstance(trace, dict) and isinstance(trace.get("calls"), list):
        want("captured_calls", len(trace["calls"]), "trace.json calls")
    turns_doc = docs.get("turns.json")
    if isinstance(turns_doc, dict) and isinstance(turns_doc.get("turns"), list):
        turns = [t for t in turns_doc["turns"] if isinstance(t, dict)]
        agent = [t for t in turns if t.get("role", "agent") == "agent"]
        want("agent_turns", len(agent), "turns.json (role agent)")
        want("trained_turns", sum(1 for t in turns if t.get("trained") is True), "turns.json (trained)")
        by_name = Counter(name for t in agent for name in (t.get("tool_calls") or []) if isinstance(name, str))
        want("tool_calls_by_name", dict(sorted(by_name.items())), "turns.json tool_calls of agent turns")
        if isinstance(summary.get("tool_calls_by_name"), dict):
            total = sum(v for v in summary["tool_calls_by_name"].values() if isinstance(v, int))
            want("tool_calls_total", total, "the sum of tool_calls_by_name")
    held = docs.get("held_out_tests.json")
    if isinstance(held, dict) and isinstance(held.get("tests"), list):
        want("held_out_tests", len(held["tests"]), "held_out_tests.json tests")
    passed, total, reward = summary.get("held_out_passed"), summary.get("held_out_tests"), summary.get("env_reward")
    if isinstance(passed, int) and isinstance(total, int):
        if passed > total:
            out.append((sfile, "$.held_out_passed", f"is {passed}, more than held_out_tests {total}"))
        elif total > 0 and isinstance(reward, (int, float)) and not math.isclose(reward, passed / total, abs_tol=1e-9):
            out.append((sfile, "$.env_reward", f"is {reward} but held_out_passed / held_out_tests = {passed}/{total}"))
    if reward is None and summary.get("reward_after_penalties") is not None:
        out.append((sfile, "$.reward_after_penalties", "must be null when env_reward is null"))
    task_ids = {}
    for fname in ("task.json", "held_out_tests.json", "summary.json"):
        doc = docs.get(fname)
        if isinstance(doc, dict) and isinstance(doc.get("task_id"), str):
            task_ids[fname] = doc["task_id"]
    if len(set(task_ids.values())) > 1:
        out.append((sfile, "$.task_id", f"task ids disagree across files: {task_ids}"))
    return out


def check_artifact_dir(folder: str | Path) -> list[Failure]:
    """Check one artifact folder: every file present, each valid, and their counts agreeing.

    Args:
        folder: the artifact folder (holds `summary.json`).

    Returns:
        `(file, json_path, reason)` triples; empty when the folder is valid.
    """
    folder = Path(folder)
    failures: list[Failure] = []
    docs: dict[str, Any] = {}
    for fname in ARTIFACT_FILES:
        path = folder / fname
        if not path.is_file():
            failures.append((str(path), "$", "missing: every artifact folder holds " + ", ".join(ARTIFACT_FILES)))
            continue
        if fname.endswith(".json"):
            file_failures, doc = _check_file(path)
            failures.extend(file_failures)
            if doc is not None and not file_failures:
                docs[fname] = doc
    failures.extend(_cross_checks(folder, docs))
    return failures


def _is_artifact_dir(folder: Path) -> bool:
    if not (folder / "summary.json").is_file():
        return False
    return any((folder / name).is_file() for name in ARTIFACT_FILES if name != "summary.json")


def _check_jsonl(path: Path, schema_name: str) -> list[Failure]:
    failures: list[Failure] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        return [(str(path), "$", f"cannot read: {exc}")]
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            failures.append((str(path), f"$[{n}]", f"line {n + 1} is not valid JSON: {exc.msg}"))
            continue
        failures.extend((str(path), f"$[{n}]" + p[1:], r) for _, p, r in check_document(record, schema_name))
    return failures


def _check_any(path: Path) -> list[Failure] | None:
    """Check a file found in a walk by its name and place; None when it is not a known document."""
    if path.suffix == ".jsonl":
        name = JSONL_SCHEMAS.get(path.parent.name)
        return _check_jsonl(path, name) if name in SCHEMA_NAMES else None
    name = PLACED_SCHEMAS.get((path.parent.name, path.name))
    if name is not None:
        if name not in SCHEMA_NAMES:
            return None
        doc, failures = _load_json(path)
        return failures or check_document(doc, name, str(path))
    if path.name in FILE_SCHEMAS:
        return _check_file(path)[0]
    return None


def validate_path(path: str | Path) -> list[Failure]:
    """Validate a file, an artifact folder, or a tree holding artifact folders (and batch outputs).

    A folder holding `summary.json` and another artifact file is an artifact folder (checked
    whole, with cross-file checks). Other known documents found in a walk are checked on their
    own: artifact files outside artifact folders, a batch's `summary/summary.json` and
    `summary/stats_by_seed.json`, and `runs/*.jsonl` (one record per line, reported as
    ``$[line index]``). Unknown files are skipped in a walk but reported when named directly.

    Args:
        path: a file or folder.

    Returns:
        `(file, json_path, reason)` triples, in a stable order; empty when everything is valid.

    Raises:
        FileNotFoundError: the path does not exist.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    if path.is_file():
        checked = _check_any(path)
        if checked is None:
            return [(str(path), "$", f"unknown artifact file; known: {', '.join(sorted(FILE_SCHEMAS))}")]
        return checked
    failures: list[Failure] = []
    artifact_dirs = [folder for folder in sorted({p.parent for p in path.rglob("summary.json")} | {path})
                     if _is_artifact_dir(folder)]
    for folder in artifact_dirs:
        failures.extend(check_artifact_dir(folder))
    found = bool(artifact_dirs)
    inside = set(artifact_dirs)
    for file in sorted(p for p in path.rglob("*") if p.is_file() and p.parent not in inside):
        checked = _check_any(file)
        if checked is not None:
            found = True
            failures.extend(checked)
    if not found:
        failures.append((str(path), "$", "no artifact folder or artifact file found under this path"))
    return failures
