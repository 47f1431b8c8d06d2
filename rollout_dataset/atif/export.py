"""One rollout as an ATIF v1.8 trajectory: the graph's main agent path as steps, every other branch
(auxiliary calls such as summaries or title generators, forks, discarded retries) as an embedded
subagent trajectory.

Each model call becomes one `agent` step: the answer's text, reasoning and tool calls (with their
ids), the tool results of the next request as the step's `observation`, and `metrics` with the
usage counts and, at capture level `tokens`, the server's `prompt_token_ids`,
`completion_token_ids` and `logprobs`. Messages of a request that no earlier step showed become
`system` / `user` steps (an earlier `assistant` message copied into a branch's context becomes an
agent step with `llm_call_count: 0` and `is_copied_context: true`). What ATIF has no field for is
kept under `extra.rollout_dataset` (the call's arrival index, finish reason, sampling parameters,
a tool manifest that differs from the trajectory's), so `atif.importer` rebuilds the same calls.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from pathlib import Path
from typing import Any, Mapping

from rollout_dataset.artifact_files import ROLLOUT_FILE, SUMMARY_FILE, TASK_FILE, TRACE_FILE
from rollout_dataset.atif import ATIF_SCHEMA_VERSION
from rollout_dataset.atif.residue import as_float32, restore
from rollout_dataset.graph import RolloutGraph, TurnNode, build_graph
from rollout_dataset.reasoning import message_reasoning
from rollout_dataset.schema import load_schema
from rollout_dataset.wire.content import json_text, text_parts

__all__ = ["EXTRA_KEY", "trajectory_document", "trajectory_of_folder"]

#: the key of this project's own fields inside ATIF `extra` objects.
EXTRA_KEY = "rollout_dataset"


def _iso(seconds: float | None) -> str | None:
    """Epoch seconds as ISO 8601 UTC (``Z``), or None."""
    if seconds is None:
        return None
    return _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _text(content: Any) -> str:
    """A chat message's content as one string (text parts joined; anything else as JSON)."""
    if content is None or isinstance(content, str):
        return content or ""
    parts = text_parts(content, strings=False)
    return "".join(parts) if parts is not None and len(parts) == len(content) else json_text(content)


def _tool_calls(message: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The answer's tool calls as ATIF `ToolCall`s; arguments that are no JSON object, or whose text is not
    what `json.dumps` writes (compact, escaped, reordered numbers), are kept as sent in extra as well."""
    out = []
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        raw = function.get("arguments")
        extra: dict[str, Any] = {}
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            arguments, extra["raw_arguments"] = {}, raw
        elif isinstance(raw, str) and json.dumps(arguments, ensure_ascii=False) != raw:
            extra["raw_arguments"] = raw  # the text as sampled ('{"cmd":"ls"}'), which the import gives back
        item: dict[str, Any] = {"tool_call_id": str(call.get("id") or ""), "function_name": str(function.get("name") or ""),
                                "arguments": arguments}
        if not call.get("id"):
            extra["id_missing"] = True
        if extra:
            item["extra"] = {EXTRA_KEY: extra}
        out.append(item)
    return out or None


def _metrics(node: TurnNode, with_tokens: bool) -> dict[str, Any] | None:
    """The call's ATIF `metrics`: usage counts, and ids and logprobs when captured."""
    usage = node.usage or {}
    metrics: dict[str, Any] = {}
    for ours, theirs in (("prompt_tokens", "prompt_tokens"), ("completion_tokens", "completion_tokens")):
        if isinstance(usage.get(ours), int):
            metrics[theirs] = usage[ours]
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") if isinstance(
        usage.get("prompt_tokens_details"), dict) else None
    if isinstance(cached, int):
        metrics["cached_tokens"] = cached
    if with_tokens and node.has_ids:
        metrics["prompt_token_ids"] = list(node.prompt_ids)
        metrics["completion_token_ids"] = list(node.sampled_ids)
        if node.sampled_logprobs is not None:  # as the dataset stores them, so a folder and its dataset export alike
            metrics["logprobs"] = as_float32(node.sampled_logprobs)
    return metrics or None


class _StepWriter:
    """Appends ATIF steps for one chain of calls, tracking which messages were already shown."""

    def __init__(self, with_tokens: bool, tools: list[Any], copied: bool) -> None:
        self.steps: list[dict[str, Any]] = []
        self.with_tokens = with_tokens
        self.tools = tools
        self.copied = copied  # the first request's earlier turns are context copied from the main path
        self.shown = 0  # request messages the steps so far show
        self.last_answer: tuple[dict[str, Any], Mapping[str, Any]] | None = None  # (its agent step, the answer)

    def _step(self, source: str, message: str, **fields: Any) -> dict[str, Any]:
        step = {"step_id": len(self.steps) + 1, "source": source, "message": message}
        step.update({k: v for k, v in fields.items() if v is not None})
        self.steps.append(step)
        return step

    def _observe(self, message: Mapping[str, Any]) -> None:
        """A tool (or unmatched) result: an observation on the last agent step, else a user step."""
        last = self.steps[-1] if self.steps and self.steps[-1]["source"] == "agent" else None
        if last is None:
            self._step("user", _text(message.get("content")), extra={EXTRA_KEY: {"chat_role": message.get("role")}})
            return
        ids = {c["tool_call_id"] for c in last.get("tool_calls") or []}
        result: dict[str, Any] = {"content": _text(message.get("content"))}
        call_id = message.get("tool_call_id")
        if isinstance(call_id, str) and call_id in ids:
            result["source_call_id"] = call_id
        elif call_id is not None:
            result["extra"] = {EXTRA_KEY: {"tool_call_id": call_id}}
        last.setdefault("observation", {"results": []})["results"].append(result)

    def _context(self, messages: list[Any], first: bool) -> None:
        for message in messages:
            if not isinstance(message, dict):
                continue
            role = message.get("role")
            if role in ("system", "developer"):
                self._step("system", _text(message.get("content")),
                           extra={EXTRA_KEY: {"chat_role": role}} if role != "system" else None,
                           is_copied_context=True if self.copied and first else None)
            elif role == "user":
                self._step("user", _text(message.get("content")), is_copied_context=True if self.copied and first else None)
            elif role == "assistant":
                self._step("agent", _text(message.get("content")), tool_calls=_tool_calls(message), llm_call_count=0,
                           is_copied_context=True, reasoning_content=message_reasoning(message),
                           extra={EXTRA_KEY: {"content_null": True}} if message.get("content") is None else None)
            else:
                self._observe(message)

    def _note_sent_back(self, messages: list[Any]) -> None:
        """Keep the previous answer as the harness sent it back, on its step, when that is not the answer.

        A harness may drop the reasoning (or otherwise rewrite its copy of the reply) before the next
        request: the import rebuilds that request from this, not from the answer.
        """
        if self.last_answer is None or not 0 < self.shown <= len(messages):
            return
        step, answer = self.last_answer
        sent = messages[self.shown - 1]
        if isinstance(sent, dict) and _as_imported(sent) != _as_imported(answer):
            step.setdefault("extra", {}).setdefault(EXTRA_KEY, {})["sent_back"] = sent

    def call(self, node: TurnNode) -> None:
        """Add one model call: the request's new messages, then its agent step."""
        messages = node.request_messages
        self._note_sent_back(messages)
        self._context(messages[self.shown:], first=not self.steps)
        answer = node.response_message or {}
        ours: dict[str, Any] = {"call_index": node.index, "finish_reason": node.finish_reason,
                                "requested_sampling_params": node.requested_sampling_params or None}
        if node.request_tools != self.tools:
            ours["tool_definitions"] = node.request_tools
        if answer.get("content") is None:  # ATIF's message is a string: null (tool calls only) is said here
            ours["content_null"] = True
        step = self._step("agent", _text(answer.get("content")), timestamp=_iso(node.started_at),
                          reasoning_content=message_reasoning(answer),
                          tool_calls=_tool_calls(answer), metrics=_metrics(node, self.with_tokens),
                          extra={EXTRA_KEY: {k: v for k, v in ours.items() if v is not None}})
        self.shown = len(messages) + 1
        self.last_answer = (step, answer)


def _as_imported(message: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of an assistant message an import rebuilds from its step: role, content, reasoning, tool calls."""
    calls = tuple((c.get("id"), (c.get("function") or {}).get("name"), (c.get("function") or {}).get("arguments"))
                  for c in message.get("tool_calls") or [] if isinstance(c, dict) and isinstance(c.get("function"), dict))
    return message.get("role"), message.get("content"), message_reasoning(message), calls


def _final_metrics(steps: list[dict[str, Any]], extra: dict[str, Any] | None) -> dict[str, Any]:
    """Totals over the agent steps' metrics."""
    out: dict[str, Any] = {"total_steps": len(steps)}
    for ours, theirs in (("prompt_tokens", "total_prompt_tokens"), ("completion_tokens", "total_completion_tokens"),
                         ("cached_tokens", "total_cached_tokens")):
        values = [s["metrics"][ours] for s in steps if ours in (s.get("metrics") or {})]
        if values:
            out[theirs] = sum(values)
    if extra:
        out["extra"] = {EXTRA_KEY: extra}
    return out


def _main_path(graph: RolloutGraph, roles: Mapping[int, str]) -> list[int]:
    """The trajectory's main path: the longest agent path (most calls), else the longest path."""
    paths = graph.paths()
    agent = [p for p in paths if all(roles.get(i) == "agent" for i in p)]
    return max(agent or paths, key=len) if paths else []


def trajectory_document(records: list[dict[str, Any]], rollout: Mapping[str, Any], summary: Mapping[str, Any],
                        task: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ATIF v1.8 trajectory of one rollout.

    Args:
        records: the trace records (`trace.json` calls).
        rollout: the rollout document (`rollout.json`): capture level and each call's role.
        summary: the summary (`summary.json`): rollout id, model, harness and its version, rewards.
        task: the task (`task.json`): its configuration's tokenizer is kept, so an import builds
            into the same dataset as the capture.

    Returns:
        The trajectory as a JSON-ready dict (null fields left out, as ATIF writers do). A rollout
        imported from ATIF gives back the trajectory it was imported from (`atif.residue`).

    Raises:
        ValueError: an imported rollout whose trajectory the records cannot complete (named).
    """
    imported = summary.get("imported_from")
    if isinstance(imported, str):  # a dataset's summary row holds it as JSON text
        imported = json.loads(imported)
    if isinstance(imported, dict) and isinstance(imported.get("atif"), dict):
        return restore(imported["atif"], records)
    graph = build_graph(records)
    with_tokens = rollout.get("capture_level") == "tokens"
    roles = {int(c["index"]): str(c.get("role")) for c in rollout.get("calls") or [] if isinstance(c, dict)}
    main = _main_path(graph, roles)
    emitted = set(main)
    provenance = summary.get("provenance")
    provenance = provenance if isinstance(provenance, dict) else {}
    harness = provenance.get("harness")
    harness = harness if isinstance(harness, dict) else {}
    version = harness.get("version") if isinstance(harness.get("version"), str) else None

    def agent_of(nodes: list[TurnNode]) -> dict[str, Any]:
        agent: dict[str, Any] = {"name": str(summary.get("harness") or "unknown"), "version": version or "unknown",
                                 "model_name": summary.get("model")}
        if nodes and nodes[0].request_tools:
            agent["tool_definitions"] = nodes[0].request_tools
        return agent

    def chain(nodes: list[TurnNode], copied: bool) -> list[dict[str, Any]]:
        writer = _StepWriter(with_tokens, nodes[0].request_tools if nodes else [], copied)
        for node in nodes:
            writer.call(node)
        return writer.steps

    main_nodes = [graph.get(i) for i in main]
    subagents = []
    for path in graph.paths():
        rest = [graph.get(i) for i in path if i not in emitted]
        if not rest:
            continue
        emitted.update(n.node_id for n in rest)
        steps = chain(rest, copied=True)
        role = roles.get(rest[-1].node_id, "auxiliary")
        subagents.append({"schema_version": ATIF_SCHEMA_VERSION, "session_id": rollout.get("session_id"),
                          "trajectory_id": f"call-{rest[0].index}", "agent": agent_of(rest), "steps": steps,
                          "final_metrics": _final_metrics(steps, None),
                          "extra": {EXTRA_KEY: {"role": role, "forked_from_call": rest[0].parent}}})
    steps = chain(main_nodes, copied=False)
    notes = []
    if version is None:
        notes.append("agent.version: the harness did not report its version")
    if not with_tokens:
        notes.append(f"capture level {rollout.get('capture_level')!r}: no token ids or logprobs were captured")
    document: dict[str, Any] = {
        "schema_version": ATIF_SCHEMA_VERSION, "session_id": rollout.get("session_id"),
        "trajectory_id": summary.get("rollout_id"), "agent": agent_of(main_nodes), "steps": steps,
        "notes": "; ".join(notes) or None,
        "final_metrics": _final_metrics(steps, {
            "rollout_id": summary.get("rollout_id"), "env": summary.get("env"), "task_id": summary.get("task_id"),
            "capture_level": rollout.get("capture_level"), "env_reward": summary.get("env_reward"),
            "reward_after_penalties": summary.get("reward_after_penalties"), "stop_reason": summary.get("stop_reason"),
            "tokenizer": ((task or {}).get("config") or {}).get("tokenizer")}),
        "subagent_trajectories": subagents or None,
    }
    return _drop_none(document)


def _drop_none(value: Any) -> Any:
    """The document without null-valued object fields (extras keep their nulls: they are ours)."""
    if isinstance(value, dict):
        return {k: (v if k == EXTRA_KEY else _drop_none(v)) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def trajectory_of_folder(folder: str | Path) -> dict[str, Any]:
    """The ATIF trajectory of one artifact folder (read from its trace, rollout and summary).

    Args:
        folder: an artifact folder written by `capture`.

    Returns:
        The trajectory document.

    Raises:
        OSError: a file cannot be read.
        ValueError: a file is not JSON.
    """
    folder = Path(folder)

    def load(name: str) -> Any:
        return json.loads((folder / name).read_text(encoding="utf-8"))

    return trajectory_document(load(TRACE_FILE).get("calls") or [], load(ROLLOUT_FILE), load(SUMMARY_FILE), load(TASK_FILE))


def export_trajectories(paths: list[str | Path], out_dir: str | Path) -> list[Path]:
    """Write `<rollout_id>.atif.json` under `out_dir` for every rollout under `paths`.

    A path is an artifact folder, a folder holding them (any depth; each checked as `validate`
    checks it), or a dataset `build` wrote (`atif.dataset`). Files are written atomically.

    Args:
        paths: artifact folders, trees of them, or built datasets.
        out_dir: the output folder (created).

    Returns:
        The files written, in input order.

    Raises:
        ArtifactError: a path is missing or holds no artifact folder.
        SchemaValidationError: a folder fails the check (its first failure names file and field).
        ValueError: a dataset's request cell was cut to the cell limit and cannot be restored, or a
            dataset row's rollout id is no rollout id (it names the file: ``../x`` would leave `out_dir`).
    """
    from rollout_dataset.atif.dataset import dataset_rollouts, is_dataset_dir
    from rollout_dataset.builder.inputs import find_artifact_dirs, load_checked_artifact
    from rollout_dataset.files import write_text_atomic

    out = Path(out_dir)
    made = not out.exists()
    written: list[Path] = []
    rollout_id = re.compile(load_schema("summary")["properties"]["rollout_id"]["pattern"])

    def write(records: list[dict[str, Any]], rollout: Mapping[str, Any], summary: Mapping[str, Any],
              task: Mapping[str, Any] | None, where: Path) -> None:
        rid = summary.get("rollout_id")
        if not isinstance(rid, str) or not rollout_id.fullmatch(rid):  # it names the file: never a path
            raise ValueError(f"{where}: rollout_id {rid!r} is not a rollout id (32 hex digits); nothing of it written")
        try:
            doc = trajectory_document(records, rollout, summary, task)
        except ValueError as exc:  # a text the build cut to the cell limit cannot come back
            raise ValueError(f"{where}: rollout {rid}{_imported_from(summary)}: {exc}; {len(written)} trajectories "
                             f"written before it, nothing of it") from None
        out.mkdir(parents=True, exist_ok=True)
        target = out / f"{rid}.atif.json"
        write_text_atomic(target, json.dumps(doc, ensure_ascii=False) + "\n")
        written.append(target)

    try:
        for path in map(Path, paths):
            if path.is_dir() and is_dataset_dir(path):
                for records, rollout, summary, task in dataset_rollouts(path):
                    write(records, rollout, summary, task, path)
                continue
            for folder in find_artifact_dirs([path]):
                art = load_checked_artifact(folder)
                write(art["trace"].get("calls") or [], art["rollout"], art["summary"], art["task"], folder)
    finally:
        if made and not written and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # a failed export leaves no empty output folder behind
    return written


def _imported_from(summary: Mapping[str, Any]) -> str:
    """`` (imported from FILE)`` for a rollout imported from ATIF, else ``""``."""
    imported = summary.get("imported_from")
    if isinstance(imported, str):
        try:
            imported = json.loads(imported)
        except ValueError:
            return ""
    return f" (imported from {imported['file']})" if isinstance(imported, dict) and imported.get("file") else ""
