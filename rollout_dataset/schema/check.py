"""Validate artifact files, artifact folders and trees of them: JSON Schema plus semantic checks.

`validate_path(path)` is what `rollout-dataset validate` and `capture` run. It finds every file it
knows by name (see `FILE_SCHEMAS`), checks it against its shipped schema, then runs the checks a
schema cannot express:

- `turns.json`: `n_prompt_ids`/`n_output_ids` equal the array lengths, the mask length equals
  prompt + output ids (zeros then ones), the logprob count equals the output id count;
- `trace.json`: every call is a valid trace record, indices strictly increase, the records' hash
  chain (``prev_sha256``) is unbroken and agrees with the proxy's ``seal`` (see
  `rollout_dataset.trace_integrity`);
- `rollout.json`: per sequence, `loss_mask` and `logprobs` align to `input_ids`, `prompt_len` lies
  within them with a zero mask before it, `n_trainable` counts the mask's ones, `node_ids` and
  `turn_lengths` hold `n_turns` entries;
- every file: a regular file inside its folder (a symlink leaving the folder is refused, never
  read), UTF-8 text, parseable JSON (never an exception, however deep or corrupt);
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
import os
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from rollout_dataset.artifact_files import (
    ARTIFACT_FILES,
    ARTIFACT_JSON_SCHEMAS,
    HELD_OUT_TESTS_FILE,
    SUMMARY_FILE,
    TASK_FILE,
    TRACE_FILE,
    TURNS_FILE,
)
from rollout_dataset.errors import SchemaValidationError
from rollout_dataset.schema import SCHEMA_NAMES, fast_schema_valid, schema_errors
from rollout_dataset.trace_integrity import SEAL_FIELD, TraceSeal, chain_failures

__all__ = [
    "ARTIFACT_FILES",
    "FILE_SCHEMAS",
    "JSONL_SCHEMAS",
    "PLACED_SCHEMAS",
    "Failure",
    "check_artifact_dir",
    "check_document",
    "file_problem",
    "format_failure",
    "load_json_file",
    "validate_path",
    "raise_for_failures",
]

logger = logging.getLogger(__name__)

Failure = tuple[str, str, str]

#: file name -> schema name, for the JSON documents of an artifact folder (`rollout_dataset.artifact_files`).
FILE_SCHEMAS: dict[str, str] = ARTIFACT_JSON_SCHEMAS

#: (parent folder name, file name) -> schema name, for a batch's outputs (checked when shipped).
PLACED_SCHEMAS: dict[tuple[str, str], str] = {
    ("summary", SUMMARY_FILE): "batch_summary",
    ("summary", "stats_by_seed.json"): "batch_stats_by_seed",
}

#: parent folder name -> schema of each line, for JSON Lines files (a batch's `runs/<strategy>.jsonl`).
JSONL_SCHEMAS: dict[str, str] = {"runs": "run_record"}



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


def _read_text(path: Path) -> tuple[str | None, list[Failure]]:
    try:
        return path.read_bytes().decode("utf-8"), []
    except UnicodeDecodeError as exc:
        return None, [(str(path), "$", f"not UTF-8 text: {exc}")]
    except OSError as exc:
        return None, [(str(path), "$", f"cannot read: {exc.strerror or exc}")]


def _parse_json(path: Path, text: str) -> tuple[Any, list[Failure]]:
    try:
        return json.loads(text), []
    except json.JSONDecodeError as exc:
        return None, [(str(path), "$", f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")]
    except RecursionError:
        return None, [(str(path), "$", "not valid JSON here: nested too deeply to parse")]


def load_json_file(path: str | Path) -> tuple[Any, list[Failure]]:
    """Read and parse a JSON file, never raising for bad content.

    Args:
        path: the file.

    Returns:
        ``(document, [])``, or ``(None, [failure])`` when it cannot be read, is not UTF-8, or is not
        JSON (too deep to parse included).
    """
    path = Path(path)
    text, failures = _read_text(path)
    if text is None:  # unreadable: `failures` says why
        return None, failures
    return _parse_json(path, text)


def file_problem(path: str | Path, root: str | Path) -> str | None:
    """Why `path` cannot be read as an artifact file of `root`, or None when it can.

    A file must be a regular file; a symlink is followed only when its target stays inside `root`
    (a link to outside content is refused, never read).

    Args:
        path: the file expected inside `root`.
        root: the folder the file belongs to.

    Returns:
        A reason (``missing``, ``a folder, not a file``, ``a symlink to ... outside ...``), or None.
    """
    path, root = Path(path), Path(root)
    if path.is_symlink():
        try:
            target = path.resolve(strict=True)
        except (OSError, RuntimeError):
            return f"a symlink to {os.readlink(path)!r}, which does not resolve; refused"
        if not target.is_relative_to(root.resolve()):
            return f"a symlink to {str(target)!r}, outside {str(root)!r}; refused (artifact files are read only " \
                   "from inside their folder)"
    if not path.exists():
        return "missing"
    if path.is_dir():
        return "a folder, not a file"
    if not path.is_file():
        return "not a regular file"
    return None


_TOKEN_ID_LIMIT = 2**31  # token ids are stored as int32


def _bad_token_ids(values: Any, path: str) -> list[tuple[str, str]]:
    """The first token id outside [0, 2**31) (they are int32 columns in the dataset)."""
    if not isinstance(values, list) or not values:
        return []
    try:
        if 0 <= min(values) and max(values) < _TOKEN_ID_LIMIT:  # in C: the common case costs little
            return []
    except TypeError:  # mixed types: the schema reports those; look for an int out of range below
        pass
    for j, v in enumerate(values):
        if isinstance(v, int) and not 0 <= v < _TOKEN_ID_LIMIT:
            return [(f"{path}[{j}]", f"token id {v} is outside [0, {_TOKEN_ID_LIMIT})")]
    return []


def _check_turns(doc: dict[str, Any]) -> list[tuple[str, str]]:
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
        out.extend(_bad_token_ids(prompt, f"{base}.prompt_ids") + _bad_token_ids(output, f"{base}.output_ids"))
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


def _check_trace(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """Arrival order and tamper evidence (the schema checks the records themselves).

    Calls are listed by arrival (`trace_integrity.in_arrival_order`): each call's index comes after
    the previous one's. The records' hash chain, followed link by link (it runs in the order calls
    ended, which overlapping calls make differ from arrival), is unbroken and, when the proxy's seal
    is there, the calls are exactly the records it wrote.
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
    for position, reason in chain_failures(calls, seal, listed="any"):
        out.append((f"$.calls[{position}]", f"trace integrity: {reason}"))
    last = -1
    for i, call in enumerate(calls):
        index = call.get("index") if isinstance(call, dict) else None
        if isinstance(index, int):
            if index <= last:
                out.append((f"$.calls[{i}].index", f"is {index}, not after the previous call's {last}"))
            last = index
    return out


def _check_rollout(doc: dict[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    sequences = doc.get("sequences") if isinstance(doc, dict) else None
    if not isinstance(sequences, list):
        return out
    for i, seq in enumerate(sequences):
        if not isinstance(seq, dict):
            continue
        base = f"$.sequences[{i}]"
        ids, mask, logps = seq.get("input_ids"), seq.get("loss_mask"), seq.get("logprobs")
        if isinstance(ids, list) and isinstance(mask, list) and len(mask) != len(ids):
            out.append((f"{base}.loss_mask", f"has {len(mask)} entries but input_ids has {len(ids)}"))
        if isinstance(ids, list) and isinstance(logps, list) and len(logps) != len(ids):
            out.append((f"{base}.logprobs", f"has {len(logps)} entries but input_ids has {len(ids)}"))
        out.extend(_bad_token_ids(ids, f"{base}.input_ids"))
        prompt_len, n_trainable = seq.get("prompt_len"), seq.get("n_trainable")
        if isinstance(ids, list) and ids and isinstance(prompt_len, int) and prompt_len > len(ids):
            out.append((f"{base}.prompt_len", f"is {prompt_len} but input_ids has {len(ids)}"))
        if isinstance(mask, list) and all(isinstance(m, int) for m in mask):
            if isinstance(n_trainable, int) and n_trainable != sum(mask):
                out.append((f"{base}.n_trainable", f"is {n_trainable} but loss_mask has {sum(mask)} ones"))
            if isinstance(prompt_len, int) and any(mask[:prompt_len]):
                first = next(j for j, m in enumerate(mask[:prompt_len]) if m)
                out.append((f"{base}.loss_mask[{first}]", f"is 1 inside the prompt (prompt_len {prompt_len})"))
        node_ids, turn_lengths, n_turns = seq.get("node_ids"), seq.get("turn_lengths"), seq.get("n_turns")
        for name, values in (("node_ids", node_ids), ("turn_lengths", turn_lengths)):
            if isinstance(values, list) and isinstance(n_turns, int) and len(values) != n_turns:
                out.append((f"{base}.{name}", f"has {len(values)} entries but n_turns is {n_turns}"))
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
            kinds = set(map(type, value))  # in C: far faster than a generator over a long array
            if len(kinds) == 1 and kinds <= {int, float}:
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
    try:
        if schema_name in SCHEMA_NAMES:
            if not fast_schema_valid(document, schema_name):  # a quick yes, else the reference check
                failures.extend((file, p, r) for p, r in schema_errors(_condensed(document), schema_name))
        else:
            logger.debug("schema %r is not shipped; only semantic checks for %s", schema_name, file)
        semantic = _SEMANTIC.get(schema_name)
        if semantic is not None:
            failures.extend((file, p, r) for p, r in semantic(document))
    except RecursionError:
        failures.append((file, "$", "nested too deeply to check"))
    return failures


def _cross_checks(folder: Path, docs: dict[str, Any]) -> list[Failure]:
    out: list[Failure] = []
    summary = docs.get(SUMMARY_FILE)
    if not isinstance(summary, dict):
        return out
    sfile = str(folder / SUMMARY_FILE)

    def want(field: str, expected: Any, why: str) -> None:
        if field in summary and summary[field] != expected:
            out.append((sfile, f"$.{field}", f"is {summary[field]!r} but {why} gives {expected!r}"))

    trace = docs.get(TRACE_FILE)
    if isinstance(trace, dict) and isinstance(trace.get("calls"), list):
        want("captured_calls", len(trace["calls"]), "trace.json calls")
    turns_doc = docs.get(TURNS_FILE)
    if isinstance(turns_doc, dict) and isinstance(turns_doc.get("turns"), list):
        turns = [t for t in turns_doc["turns"] if isinstance(t, dict)]
        agent = [t for t in turns if t.get("role", "agent") == "agent"]
        want("agent_turns", len(agent), "turns.json (role agent)")
        want("trained_turns", sum(1 for t in turns if t.get("trained") is True), "turns.json (trained)")
        by_name = Counter(name for t in agent for name in (t.get("tool_calls") or []) if isinstance(name, str))
        want("tool_calls_by_name", dict(sorted(by_name.items())), "turns.json tool_calls of agent turns")
        if isinstance(summary.get("tool_calls_by_name"), dict):
            calls_total = sum(v for v in summary["tool_calls_by_name"].values() if isinstance(v, int))
            want("tool_calls_total", calls_total, "the sum of tool_calls_by_name")
    held = docs.get(HELD_OUT_TESTS_FILE)
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
    for fname in (TASK_FILE, HELD_OUT_TESTS_FILE, SUMMARY_FILE):
        doc = docs.get(fname)
        if isinstance(doc, dict) and isinstance(doc.get("task_id"), str):
            task_ids[fname] = doc["task_id"]
    if len(set(task_ids.values())) > 1:
        out.append((sfile, "$.task_id", f"task ids disagree across files: {task_ids}"))
    return out


def check_artifact_dir(folder: str | Path, documents: dict[str, Any] | None = None) -> list[Failure]:
    """Check one artifact folder: every file present, each valid, and their counts agreeing.

    This is the one definition of a valid artifact folder: `validate`, `capture` and `build` all
    call it (a check added here applies to all of them). Each file is read once; a symlink whose
    target leaves the folder, a folder or a special file in place of a file, text that is not
    UTF-8 and JSON that does not parse are failures, never exceptions.

    Args:
        folder: the artifact folder (holds `summary.json`).
        documents: when given, filled with what was read, by file name: the parsed JSON documents
            and the texts of `visible_tests.txt` / `samples.md` (so a caller uses exactly what was
            checked, without reading the files again).

    Returns:
        `(file, json_path, reason)` triples; empty when the folder is valid.
    """
    folder = Path(folder)
    failures: list[Failure] = []
    docs: dict[str, Any] = {}
    for fname in ARTIFACT_FILES:
        path = folder / fname
        problem = file_problem(path, folder)
        if problem is not None:
            if problem == "missing":
                problem = "missing: every artifact folder holds " + ", ".join(ARTIFACT_FILES)
            failures.append((str(path), "$", problem))
            continue
        text, file_failures = _read_text(path)
        if text is not None and fname.endswith(".json"):
            doc, file_failures = _parse_json(path, text)
            if not file_failures:
                file_failures = check_document(doc, FILE_SCHEMAS[fname], str(path))
            text = doc
        failures.extend(file_failures)
        if not file_failures:
            docs[fname] = text
    failures.extend(_cross_checks(folder, docs))
    if documents is not None:
        documents.update(docs)
    return failures


def _is_artifact_dir(folder: Path) -> bool:
    """A folder holding any artifact file but a lone `trace.json` (a proxy's trace, checked on its own).

    A batch's `summary/summary.json` is a placed document, not a rollout's summary.
    """
    found = {name for name in ARTIFACT_FILES if os.path.lexists(folder / name)} - {TRACE_FILE}
    if folder.name == "summary" and found == {SUMMARY_FILE}:
        return False
    return bool(found)


def _walk_files(root: Path) -> list[Path]:
    """Every entry below `root` that is not a folder, sorted; symlinked folders are not entered."""
    out: list[Path] = []
    for parent, dirs, files in os.walk(root, followlinks=False):
        out.extend(Path(parent) / name for name in files)
        out.extend(Path(parent) / name for name in dirs if (Path(parent) / name).is_symlink())
    return sorted(out)


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
        except RecursionError:
            failures.append((str(path), f"$[{n}]", f"line {n + 1} is nested too deeply to parse"))
            continue
        failures.extend((str(path), f"$[{n}]" + p[1:], r) for _, p, r in check_document(record, schema_name))
    return failures


def _walk_schema(path: Path) -> str | None:
    """The schema of a file found in a walk, by its name and place; None when it is not a known document."""
    if path.suffix == ".jsonl":
        name = JSONL_SCHEMAS.get(path.parent.name)
    else:
        name = PLACED_SCHEMAS.get((path.parent.name, path.name)) or FILE_SCHEMAS.get(path.name)
    return name if name in SCHEMA_NAMES else None


def _check_any(path: Path) -> list[Failure] | None:
    """Check a file found in a walk by its name and place; None when it is not a known document."""
    name = _walk_schema(path)
    if name is None:
        return None
    if path.suffix == ".jsonl":
        return _check_jsonl(path, name)
    doc, failures = load_json_file(path)
    return failures or check_document(doc, name, str(path))


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
    if not path.is_dir():
        if not path.is_file():
            return [(str(path), "$", "not a regular file")]
        checked = _check_any(path)
        if checked is None:
            return [(str(path), "$", f"unknown artifact file; known: {', '.join(sorted(FILE_SCHEMAS))}")]
        return checked
    failures: list[Failure] = []
    files = _walk_files(path)
    artifact_dirs = [folder for folder in sorted({p.parent for p in files} | {path}) if _is_artifact_dir(folder)]
    for folder in artifact_dirs:
        failures.extend(check_artifact_dir(folder))
    found = bool(artifact_dirs)
    inside = set(artifact_dirs)
    for file in (p for p in files if p.parent not in inside and _walk_schema(p) is not None):
        found = True
        problem = file_problem(file, path)
        failures.extend([(str(file), "$", problem)] if problem else _check_any(file) or [])
    if not found:
        failures.append((str(path), "$", "no artifact folder or artifact file found under this path"))
    return failures
