"""ATIF trajectories (bare files, Harbor trial and job folders) as artifact documents for `build`.

Each agent step that called a model becomes one trace record of a chat completion: the request is
the chat so far (system, user, earlier answers, tool results), the answer is the step's message,
reasoning and tool calls, and the ids and logprobs come from the step's `metrics`. Those records
go through the same `export_rollout` / `turns_document` / `summary_document` code a capture uses,
so the builder reads an imported rollout exactly as a captured one.

A trajectory whose every model step carries `prompt_token_ids` and `completion_token_ids` is
imported at capture level `tokens` (a step without `logprobs` with `per_token_logps` null, as a
capture records a call whose server gave none); otherwise at `text`, the first missing field
named in `summary.json`'s `imported_from.level_reason`. Nothing is invented beyond what the
artifact schemas require (see docs/atif.md for each such value). A bad file raises
`SchemaValidationError` naming the file and the field.
"""

from __future__ import annotations

import hashlib
import contextlib
import json
import math
import os
import re
import shutil
import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from rollout_dataset.artifact_files import SUMMARY_FILE, TRAJECTORY_FILE
from rollout_dataset.atif.records import message_text, ours, records_of
from rollout_dataset.atif.residue import residue
from rollout_dataset.documents import RolloutCounts, rollout_files, samples_text, summary_document
from rollout_dataset.envs.base import Score, TaskInfo
from rollout_dataset.errors import SchemaValidationError
from rollout_dataset.export import export_rollout, turns_document
from rollout_dataset.schema import schema_errors
from rollout_dataset.trace_integrity import reseal

__all__ = ["AtifSource", "HARBOR_RESULT_FILE", "HARBOR_TRAJECTORY", "ATIF_SUFFIX", "find_atif_sources",
           "import_documents", "split_inputs", "write_imported", "ImportedInputs", "imported_inputs"]

#: a Harbor trial folder's result (`TrialResult`) and its agent's ATIF trajectory.
HARBOR_RESULT_FILE = "result.json"
HARBOR_TRAJECTORY = Path("agent") / TRAJECTORY_FILE
#: a bare ATIF file is named `trajectory.json` or `<name>.atif.json`.
ATIF_SUFFIX = ".atif.json"

_HEX32 = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True)
class AtifSource:
    """One trajectory to import.

    Attributes:
        file: the ATIF file.
        root: the input it was found under (names in messages and on the card are relative to it).
        result: the Harbor trial's `result.json`, when the file is a trial's `agent/trajectory.json`.
    """

    file: Path
    root: Path
    result: Path | None = None

    @property
    def name(self) -> str:
        """The file relative to its input's parent (what the card and summary name)."""
        try:
            return str(self.file.relative_to(self.root.parent))
        except ValueError:
            return self.file.name


def _is_atif_name(name: str) -> bool:
    return name == TRAJECTORY_FILE or name.endswith(ATIF_SUFFIX)


def _sources_in(path: Path) -> Iterator[AtifSource]:
    """ATIF files under one input (symlinked folders not entered; artifact folders' own export skipped)."""
    if path.is_file():
        if _is_atif_name(path.name) or path.suffix == ".json":
            trial = path.parent.parent
            result = trial / HARBOR_RESULT_FILE if path.parent.name == "agent" else None
            yield AtifSource(path, path, result if result and result.is_file() else None)
        return
    for parent, dirs, files in os.walk(path, followlinks=False):
        dirs.sort()
        if SUMMARY_FILE in files:  # an artifact folder: its trajectory.json is its own export
            continue
        here = Path(parent)
        trajectory = here / HARBOR_TRAJECTORY
        if HARBOR_RESULT_FILE in files and not trajectory.exists() and _is_trial_result(here / HARBOR_RESULT_FILE):
            yield AtifSource(trajectory, path, here / HARBOR_RESULT_FILE)  # named when read: the agent wrote none
        for name in sorted(files):
            if not _is_atif_name(name):
                continue
            result = here.parent / HARBOR_RESULT_FILE if here.name == "agent" else None
            yield AtifSource(here / name, path, result if result is not None and result.is_file() else None)


def _is_trial_result(path: Path) -> bool:
    """Whether a `result.json` is a Harbor trial's (a `TrialResult`: it names its trial), not a job's."""
    try:
        document = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(document, dict) and "trial_name" in document


def find_atif_sources(paths: Iterable[str | Path]) -> list[AtifSource]:
    """The ATIF trajectories under the inputs: Harbor trials (`<trial>/agent/trajectory.json` with
    `<trial>/result.json`), job folders holding trials, and bare `trajectory.json` / `*.atif.json` files.

    Args:
        paths: files or folders given to `build`.

    Returns:
        The sources in input order, each tree sorted.
    """
    out: list[AtifSource] = []
    for p in map(Path, paths):
        out.extend(s for s in _sources_in(p) if s not in out)
    return out


def split_inputs(paths: Iterable[str | Path]) -> tuple[list[str], list[AtifSource]]:
    """Split `build`'s inputs into those holding artifact folders and the ATIF trajectories.

    Args:
        paths: files or folders given to `build`.

    Returns:
        ``(artifact inputs, ATIF sources)``: a folder holding both is in both lists.
    """
    artifacts: list[str] = []
    sources: list[AtifSource] = []
    for p in map(Path, paths):
        found = [s for s in _sources_in(p) if s not in sources] if p.exists() else []
        sources.extend(found)
        holds_artifacts = p.is_dir() and ((p / SUMMARY_FILE).exists() or any(
            SUMMARY_FILE in files for _, _, files in os.walk(p, followlinks=False)))
        if holds_artifacts or not found:
            artifacts.append(str(p))  # a path holding nothing is named by the builder ("no artifact folder")
    return artifacts, sources


# --- reading and checking ---------------------------------------------------------------------


def _load(path: Path, what: str) -> Any:
    """A JSON file (a leading UTF-8 byte order mark, which some Windows tools write, is skipped)."""
    if what == "ATIF trajectory" and not path.exists() and (path.parent.parent / HARBOR_RESULT_FILE).is_file():
        raise SchemaValidationError([(str(path), "$", "is missing: the Harbor trial folder has result.json but no "
                                      "agent/trajectory.json (its agent wrote no trajectory)")])
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise SchemaValidationError([(str(path), "$", f"cannot read the {what}: {exc}")]) from None
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise SchemaValidationError([(str(path), "$", f"not valid JSON (a truncated file?): {exc}")]) from None
    if _MAYBE_UNSTORABLE.search(text):
        bad = _unstorable(document)
        if bad is not None:
            raise SchemaValidationError([(str(path), *bad)])
    return document


#: what in a JSON text can parse to a value no artifact can hold: NaN/Infinity, a surrogate escape.
_MAYBE_UNSTORABLE = re.compile(r"NaN|Infinity|\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _unstorable(document: Any) -> tuple[str, str] | None:
    """The first value of a parsed document no artifact can hold, as ``(json path, reason)``.

    JSON has no NaN or Infinity (Python's parser takes them), and a lone surrogate escape parses to
    text with no UTF-8 form: either would break the build far from the file, so the file is refused.
    """
    stack: list[tuple[str, Any]] = [("$", document)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return where, f"is {value}: NaN and Infinity are not JSON numbers"
        if isinstance(value, str) and _LONE_SURROGATE.search(value):
            return where, "holds a lone surrogate (an unpaired \\ud800-\\udfff escape): text with no UTF-8 form"
        if isinstance(value, dict):
            for key, item in reversed(value.items()):
                if _LONE_SURROGATE.search(key):
                    return where, f"has a key with a lone surrogate ({key!r}): text with no UTF-8 form"
                stack.append((f"{where}.{key}", item))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in reversed(list(enumerate(value))))
    return None



def _check_order_and_ids(doc: dict[str, Any], where: str, file: str) -> list[tuple[str, str, str]]:
    """Steps in order (step_id 1, 2, ...), logprobs aligned to ids.

    A prompt that does not extend the previous one is no failure: an agent that summarises its
    context (terminus-2) restarts its prompt, and that call starts a new sequence, as a capture's would.
    """
    failures = []
    if not doc["steps"]:  # Harbor's validator refuses it too: a trajectory has at least one step
        failures.append((file, f"{where}.steps", "is empty: a trajectory has at least one step"))
    for i, step in enumerate(doc["steps"]):
        if step["step_id"] != i + 1:
            failures.append((file, f"{where}.steps[{i}].step_id",
                             f"is {step['step_id']}, expected {i + 1}: steps are out of order"))
        metrics = step.get("metrics") or {}
        out, lps = metrics.get("completion_token_ids"), metrics.get("logprobs")
        if lps is not None and out is not None and len(lps) != len(out):
            failures.append((file, f"{where}.steps[{i}].metrics.logprobs",
                             f"has {len(lps)} values for {len(out)} completion_token_ids"))
    for k, sub in enumerate(doc.get("subagent_trajectories") or []):
        failures += _check_order_and_ids(sub, f"{where}.subagent_trajectories[{k}]", file)
    return failures


def _short(reason: str, limit: int = 300) -> str:
    """A schema failure's reason cut to `limit` characters (it quotes the offending value, which can be a
    whole trajectory), so a refusal stays one readable line."""
    return reason if len(reason) <= limit else f"{reason[:limit]}... ({len(reason) - limit} more characters)"


def read_trajectory(path: Path) -> dict[str, Any]:
    """Read and check one ATIF file.

    Args:
        path: the file.

    Returns:
        The trajectory document.

    Raises:
        SchemaValidationError: not JSON, not a valid ATIF trajectory (for the fields the importer
            reads), no steps, steps out of order, or misaligned logprobs; each failure names the
            file and the field.
    """
    doc = _load(path, "ATIF trajectory")
    failures = [(str(path), where, _short(reason)) for where, reason in schema_errors(doc, "atif_trajectory")]
    if not failures:
        failures = _check_order_and_ids(doc, "$", str(path))
    if failures:
        raise SchemaValidationError(failures)
    return doc


# --- trajectory (+ Harbor result) -> artifact documents ---------------------------------------


def _trial_outcome(result_path: Path) -> tuple[dict[str, Any], float | None, dict[str, Any]]:
    """A Harbor `result.json`: the result, its reward (`verifier_result.rewards.reward`), all numeric rewards.

    Raises:
        SchemaValidationError: not JSON, or the verifier crashed (no `verifier_result` and an
            `exception_info`).
    """
    result = _load(result_path, "Harbor trial result")
    if not isinstance(result, dict):
        raise SchemaValidationError([(str(result_path), "$", "is not a JSON object (a Harbor TrialResult)")])
    verifier = result.get("verifier_result")
    rewards = verifier.get("rewards") if isinstance(verifier, dict) else None
    exception = result.get("exception_info")
    if not isinstance(rewards, dict) and isinstance(exception, dict):
        kind = str(exception.get("exception_type") or "an exception")
        message = str(exception.get("exception_message") or "").splitlines()[0:1]
        raise SchemaValidationError([(str(result_path), "$.verifier_result",
                                      f"is null: the trial failed before the verifier scored it ({kind}"
                                      f"{': ' + message[0][:200] if message else ''}); no reward to train on")])
    numeric = {k: v for k, v in (rewards or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    reward = numeric.get("reward", next(iter(numeric.values())) if len(numeric) == 1 else None)
    return result, (float(reward) if reward is not None else None), numeric


def _rollout_id(doc: dict[str, Any], result: dict[str, Any], raw: bytes) -> str:
    """An exported trajectory's own rollout id, else the Harbor trial's id, else a digest of the file."""
    for candidate in (doc.get("trajectory_id"), str(result.get("id") or "").replace("-", "")):
        if isinstance(candidate, str) and _HEX32.match(candidate):
            return candidate
    return hashlib.sha256(raw).hexdigest()[:32]


def import_documents(source: AtifSource) -> dict[str, Any]:
    """The artifact documents of one ATIF trajectory, ready to write (`trajectory.json` included, as read).

    Args:
        source: the trajectory (and the Harbor trial's `result.json`, if any).

    Returns:
        file name -> document (a dict for `.json` names, text otherwise).

    Raises:
        SchemaValidationError: the trajectory or the trial result is bad (see `read_trajectory`),
            the trial's verifier crashed, or a file found in a folder is a symlink leading out of it;
            one `(file, json path, reason)` per failure.
    """
    for file in (source.file, source.result):
        if file is not None and source.root.is_dir() and file.is_symlink() and \
                not file.resolve().is_relative_to(source.root.resolve()):
            raise SchemaValidationError([(str(file), "$", f"a symlink to {str(file.resolve())!r}, outside the input "
                                          f"{str(source.root)!r}; refused (a folder's trajectories are read only "
                                          "from inside it)")])
    doc = read_trajectory(source.file)
    result, reward, rewards = _trial_outcome(source.result) if source.result else ({}, None, {})
    own = ours(doc.get("final_metrics") or {})
    if not source.result and isinstance(own.get("env_reward"), (int, float)):
        reward = float(own["env_reward"])
    rid = _rollout_id(doc, result, source.file.read_bytes())
    session = str(doc.get("session_id") or rid)
    imported = records_of(doc, session, source.name)
    records, level = imported.records, imported.level
    task_id = str(result.get("task_name") or own.get("task_id") or source.file.stem)
    # the task statement: the first user step with text (an empty first one is no statement), else the task id
    instruction = next((t for t in (message_text(s["message"]) for s in doc["steps"] if s["source"] == "user")
                        if t.strip()), task_id)
    agent = doc["agent"]
    model = agent.get("model_name") or _result_model(result)
    task = TaskInfo(env=str(own.get("env") or ("harbor" if source.result else "atif")), task_id=task_id, task_index=0,
                    title=task_id, instruction=instruction, source=f"atif:{source.name}", dataset_seed=0,
                    rollout_seed=0, n_prompts=1,
                    config={"imported_from": source.name, "trial": result.get("trial_name"),
                            **({"tokenizer": own["tokenizer"]} if isinstance(own.get("tokenizer"), str) else {})})
    document = export_rollout(records, session_id=session, capture_level=level,
                              metadata={"task_id": task_id, "model": model, "imported_from": "atif"})
    turns = turns_document(document, records)
    created = result.get("started_at") or next((s.get("timestamp") for s in doc["steps"] if s.get("timestamp")), None)
    created_at = _iso_z(created) or "1970-01-01T00:00:00Z"
    extra: dict[str, Any] = {"imported_from": {
        "format": "atif", "file": source.name, "trial": result.get("trial_name"), "level_reason": imported.level_reason,
        "atif": residue(doc, records, imported.id_steps)}}
    if rewards:
        extra["env_metrics"] = {f"verifier_{k}": v for k, v in rewards.items()}
    unscored = None if reward is not None else (
        "the Harbor trial's result.json has no numeric verifier reward" if source.result
        else "an ATIF trajectory carries no reward (a bare file, not a Harbor trial with its result.json)")
    summary = summary_document(
        rollout_id=rid, created_at=created_at, task=task, model=str(model or "unknown"),
        harness=f"atif:{agent['name']}", counts=RolloutCounts.of(records, document, turns),
        score=Score(env_reward=reward, reward_after_penalties=reward, verifier=True, unscored_reason=unscored),
        timed_out=False, stop_reason=str(own.get("stop_reason") or "unknown"), capture_level=level, timings={},
        errors=[], extra=extra)
    header = {"rollout": rid, "reward": reward, "imported_from": source.name}
    trace = reseal({"schema_version": 1, "session": session, "calls": records})
    samples = samples_text(document, records, None, header,
                           reason="Imported from an ATIF trajectory: no tokenizer was recorded, so the token "
                                  "stream is not rendered.")
    return {**rollout_files(trace=trace, document=document, turns=turns, task=task, samples=samples),
            SUMMARY_FILE: summary, TRAJECTORY_FILE: doc}


def _result_model(result: dict[str, Any]) -> str | None:
    """The model a Harbor `result.json` names (`agent_info.model_info`: ``provider/name``), or None."""
    info = result.get("agent_info")
    model = info.get("model_info") if isinstance(info, dict) else None
    if not isinstance(model, dict) or not isinstance(model.get("name"), str) or not model["name"]:
        return None
    provider = model.get("provider")
    return f"{provider}/{model['name']}" if isinstance(provider, str) and provider else model["name"]


def _iso_z(value: Any) -> str | None:
    """An ISO 8601 time as UTC with a ``Z`` suffix, to the second (None when it does not parse)."""
    if not isinstance(value, str):
        return None
    try:
        moment = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=_dt.timezone.utc)
        moment = moment.astimezone(_dt.timezone.utc)
    except (ValueError, OverflowError):  # 9999-12-31T23:59:59-01:00 is past year 9999 in UTC
        return None
    return moment.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def write_imported(sources: Iterable[AtifSource], stage: str | Path, origins: dict[str, str] | None = None,
                   ) -> tuple[list[Path], list[tuple[str, str]]]:
    """Import each source into its own artifact folder under `stage`; a bad one is left out, named.

    Each folder is written under a temporary name and renamed when whole, so a failure never leaves
    half a folder among the finished ones.

    Args:
        sources: the trajectories (`find_atif_sources`).
        stage: an empty folder (the caller removes it after the build).
        origins: filled with each folder written -> the file it was imported from (for messages).

    Returns:
        ``(artifact folders written, [(file, "file: field: reason"), ...] left out)``.
    """
    from rollout_dataset.builder import staging
    from rollout_dataset.builder.inputs import first_failure_line
    from rollout_dataset.files import write_text_atomic
    from rollout_dataset.schema.check import check_artifact_dir

    stage = Path(stage)
    folders: list[Path] = []
    refused: list[tuple[str, str]] = []
    for n, source in enumerate(sources):
        try:
            documents = import_documents(source)
        except SchemaValidationError as exc:
            refused.append((str(source.file), first_failure_line(exc)))
            continue
        except ValueError as exc:  # ids the graph cannot pack (a float, beyond 64 bits)
            refused.append((str(source.file), f"{source.file}: $: {exc}".replace("\n", " ")))
            continue
        rid = documents[SUMMARY_FILE]["rollout_id"]
        final = stage / f"{n:06d}-{rid}"
        partial = stage / f".partial-{n:06d}"
        partial.mkdir(parents=True)
        for name, content in documents.items():
            text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False) + "\n"
            write_text_atomic(partial / name, text)
        failures = check_artifact_dir(partial)
        if failures:  # what the build would refuse for the whole dataset: this trajectory alone is left out
            shutil.rmtree(partial)
            file, where, reason = failures[0]
            refused.append((str(source.file), f"{source.file}: imports as an artifact folder that is not valid: "
                                              f"{Path(file).name}: {where}: {reason}".replace("\n", " ")))
            continue
        partial.rename(final)
        folders.append(final)
        if origins is not None:
            origins[str(final)] = str(source.file)
        staging.checkpoint("imported")
    return folders, refused


@dataclass
class ImportedInputs:
    """What `imported_inputs` gives: the build's inputs with every trajectory turned into an artifact folder.

    Attributes:
        paths: the artifact folders (and trees) given, plus the folder holding the imported ones.
        refused: ``(file, "file: field: reason")`` of each trajectory left out.
        origins: each imported artifact folder -> the ATIF file it was imported from.
    """

    paths: list[str]
    refused: list[tuple[str, str]]
    origins: dict[str, str] = field(default_factory=dict)

    def source_named(self, text: str) -> str:
        """`text` (a build's message) with each import folder's path replaced by the file it was imported from.

        The import folder is removed when the build ends: a message naming it would name nothing.

        Args:
            text: a message that may name import folders (or files in them).

        Returns:
            The message naming the source files instead.
        """
        for folder in sorted(self.origins, key=len, reverse=True):
            source = self.origins[folder]

            def named(match: re.Match[str], source: str = source) -> str:
                return source + (f" (imported as {match.group(1)})" if match.group(1) else "")

            text = re.sub(re.escape(folder) + r"(?:/([^\s:]+))?", named, text)
        return text


@contextlib.contextmanager
def imported_inputs(paths: Iterable[str | Path], beside: str | Path) -> Iterator[ImportedInputs]:
    """Build inputs in which Harbor trials, job folders and bare ATIF files are artifact folders.

    The trajectories are imported into ``<beside>.atif-import-<pid>`` next to `beside` (the dataset
    folder to build: the same file system), locked while the block runs and removed when it ends,
    whatever happens in it. A process killed meanwhile (SIGKILL) leaves it unlocked: the next import or
    build beside `beside` removes it and logs its name (`builder.staging.clean_stale`); the import
    folder of a build still running is left alone.

    Args:
        paths: what `build` would take, mixed with ATIF sources (`find_atif_sources`).
        beside: the dataset folder the build writes.

    Yields:
        The inputs to give `rollout_dataset.build`, and the trajectories left out (named).

    Raises:
        OSError: the import folder could not be written (a full disk); nothing of it is left.
        DatasetDirError: another build in this process is importing beside `beside` (an `OSError`).
    """
    from rollout_dataset.builder.staging import IMPORT_INFIX, clean_stale, owned_folder

    artifacts, sources = split_inputs(paths)
    if not sources:
        yield ImportedInputs(list(artifacts), [])
        return
    out = Path(beside).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(out, (IMPORT_INFIX,))  # the other leftovers only under the build's lock, after restore_aside
    with owned_folder(out, IMPORT_INFIX) as stage:
        origins: dict[str, str] = {}
        folders, refused = write_imported(sources, stage, origins)
        yield ImportedInputs(list(artifacts) + ([str(stage)] if folders else []), refused, origins)
