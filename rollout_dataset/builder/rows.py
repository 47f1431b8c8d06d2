"""Pure row-making: one artifact folder's documents -> the rows of every config.

Nothing here touches parquet or the file system except `read_artifact`. The row functions take the
parsed documents and return lists of dicts whose keys are exactly the config's columns (see
`configs.py`). Two encodings keep the dataset small without losing anything:

- `turns`: a turn whose tokens lie on a sequence row points at it (`sequence_index`); any other turn
  stores only its prompt delta after the longest prefix shared with an earlier turn's prompt+output.
  `readers.turn_token_arrays` / `readers.turn_prompt_ids` give the full arrays back, exactly.
- `trace`: the request's `messages` keep only what follows the longest message prefix shared with an
  earlier call; token arrays and per-token logprobs are dropped from the response (they are in
  sequences/turns). `readers.trace_request` gives the full request back.

`samples` holds, by default, a viewer-sized preview of samples.md (header + head + tail within
`PREVIEW_CHARS`, cut with `rollout_dataset.render.truncate_middle`'s marker, `truncated = True`);
mode ``"full"`` keeps the whole file split into parts (lossless). Both modes have the same columns.

Cells of text over `MAX_CELL_BYTES` are never dropped silently: a full-mode samples.md is split into
parts (lossless); a trace request/response is cut to head + tail with a marker and `truncated = True`.
Token arrays are never cut (a trainer needs them whole); a row over `MAX_ROW_BYTES` is logged.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from rollout_dataset.artifact_files import ARTIFACT_FILES, SUMMARY_FILE
from rollout_dataset.builder.configs import resolved_columns
from rollout_dataset.errors import ArtifactError
from rollout_dataset.export.rows import json_cell, sequence_row
from rollout_dataset.reasoning import message_reasoning
from rollout_dataset.wire.records import call_answer_chat, call_request_chat

__all__ = [
    "ARTIFACT_FILES",
    "MAX_CELL_BYTES",
    "MAX_ROW_BYTES",
    "PREVIEW_CHARS",
    "SAMPLES_MODES",
    "call_answer",
    "call_chat_messages",
    "read_artifact",
    "rollout_rows",
    "summary_row",
    "task_row",
    "visible_tests_row",
    "held_out_test_rows",
    "trace_rows",
    "turn_rows",
    "sequence_rows",
    "sample_rows",
    "conversation_rows",
    "chat_message",
    "group_id_of",
    "tokenizer_name",
    "preview_text",
    "cut_text",
    "response_message",
]

log = logging.getLogger(__name__)

MAX_CELL_BYTES = 1_000_000
MAX_ROW_BYTES = 2_000_000
PREVIEW_CHARS = 8_000  # characters of samples.md kept in a preview row (the cut marker is extra)
SAMPLES_MODES = ("preview", "full")
_HEADER_MAX = 2_000  # at most this many leading characters count as the header a preview always keeps


_dumps = json_cell


def read_artifact(folder: str | Path) -> dict[str, Any]:
    """Read one artifact folder.

    Args:
        folder: the artifact folder of one rollout (see docs/architecture.md).

    Returns:
        ``{"summary", "task", "trace", "rollout", "turns", "held_out_tests"}`` parsed documents plus
        ``"visible_tests"`` and ``"samples"`` texts and ``"folder"``.

    Raises:
        ArtifactError: a file is missing or is not valid JSON (the message names the file).
    """
    folder = Path(folder)
    out: dict[str, Any] = {"folder": str(folder)}
    for name in ARTIFACT_FILES:
        path = folder / name
        if not path.is_file():
            raise ArtifactError(f"{path}: missing (an artifact folder needs {', '.join(ARTIFACT_FILES)})")
        text = path.read_text(encoding="utf-8")
        stem = name.split(".")[0]
        if name.endswith(".json"):
            try:
                out[stem] = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ArtifactError(f"{path}: not valid JSON: {exc}") from None
        else:
            out[stem] = text
    rid = out["summary"].get("rollout_id") if isinstance(out["summary"], dict) else None
    if not isinstance(rid, str) or not rid:
        raise ArtifactError(f"{folder / SUMMARY_FILE}: field rollout_id missing or not a string")
    return out


def _convert(value: Any, dtype: str) -> Any:
    if dtype == "json":
        return None if value is None else _dumps(value)
    return value


def _project(doc: dict[str, Any], config: str, extra: dict[str, Any]) -> dict[str, Any]:
    """Columns from `extra` first, else the column's source field in `doc`."""
    row = {}
    for col in resolved_columns(config):
        if col.name in extra:
            row[col.name] = _convert(extra[col.name], col.dtype) if col.dtype == "json" else extra[col.name]
        else:
            field = col.source[1] if col.source else col.name
            row[col.name] = _convert(doc.get(field), col.dtype)
    return row


def cut_text(text: str, limit: int = MAX_CELL_BYTES) -> tuple[str, bool]:
    """Cut a text cell over `limit` UTF-8 bytes to head + tail with a marker.

    Args:
        text: the cell's text.
        limit: the byte budget of the cell.

    Returns:
        ``(text, was_cut)``; the marker names how many characters were cut.
    """
    if len(text) * 4 <= limit or len(text.encode("utf-8")) <= limit:
        return text, False
    keep = max(limit // 8, 1)  # characters kept on each side (<= 4 bytes each)
    cut = len(text) - 2 * keep
    marker = f"\n[... {cut} characters cut by rollout-dataset: cell over {limit} bytes ...]\n"
    return text[:keep] + marker + text[-keep:], True


def group_id_of(summary: dict[str, Any]) -> str:
    """The group a rollout belongs to: rollouts a trainer compares with each other (GRPO baseline).

    Args:
        summary: summary.json of the rollout.

    Returns:
        ``"<env>:<task_id>:<dataset_seed>"``: same environment, same task, same dataset seed.
    """
    return f"{summary.get('env')}:{summary.get('task_id')}:{summary.get('dataset_seed')}"


# --------------------------------------------------------------------------------------- configs

def tokenizer_name(art: dict[str, Any]) -> str | None:
    """The tokenizer of a rollout's token ids, as its capture named it.

    A rollout below capture level `tokens` holds no token ids, so it has no tokenizer: it never
    conflicts with the dataset's (rollouts of any models at level `text` build into one dataset).

    Args:
        art: the documents from `read_artifact`.

    Returns:
        None below level `tokens`; else task.json config ``tokenizer``; ``"builtin"`` for a capture
        against the local backend (no ``base_url``); else the served model's ``root`` as the server reported it (summary
        ``provenance.model.root``: the local backend's tokenizer, vLLM's model id, which is where it
        loaded its tokenizer from) when that is ``builtin`` or a Hub id; else the model name.
    """
    if art["summary"].get("capture_level") != "tokens":
        return None
    config = (art["task"] or {}).get("config") or {}
    tokenizer = None
    if isinstance(config, dict):
        tokenizer = config.get("tokenizer")
        if tokenizer is None and "base_url" in config and config["base_url"] is None:
            tokenizer = "builtin"  # capture's default: the local backend's built-in tokenizer
    return tokenizer or _served_root(art["summary"]) or art["summary"].get("model")


#: a Hub repo id ``owner/name``: never a path (a recorded local path is cut to ``.../name``)
_HUB_ID = re.compile(r"^(?!.*\.\.)[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


def _served_root(summary: dict[str, Any]) -> str | None:
    """The served model's recorded ``root`` when it names a tokenizer a build may look up (a Hub id, ``builtin``)."""
    model = ((summary.get("provenance") or {}).get("model") or {}) if isinstance(summary.get("provenance"), dict) else {}
    root = model.get("root") if isinstance(model, dict) else None
    if isinstance(root, str) and (root == "builtin" or ("/" in root and _HUB_ID.match(root))):
        return root
    return None


def summary_row(art: dict[str, Any], counts: dict[str, int | str]) -> dict[str, Any]:
    """The `summary` row of one rollout.

    Args:
        art: the documents from `read_artifact`.
        counts: ``n_sequences``, ``n_trace_rows``, ``n_turn_rows``, ``n_held_out_rows``,
            ``n_sample_rows``, ``n_cut_cells``, ``n_unique_tokens`` of this rollout, and
            ``samples_mode`` (``"preview"`` or ``"full"``).

    Returns:
        The row dict.
    """
    params: list[Any] = []
    for call in art["trace"].get("calls", []):
        p = call.get("effective_sampling_params")
        if p and p not in params and call.get("capture_level") != "none":
            params.append(p)
    prov = art["summary"].get("provenance")
    prov = prov if isinstance(prov, dict) else {}

    def part(name: str) -> dict[str, Any]:
        value = prov.get(name)
        return value if isinstance(value, dict) else {}

    extra = {"tokenizer": tokenizer_name(art), "sampling_params": params,
             "served_model_id": part("model").get("id"), "served_model_root": part("model").get("root"),
             "server_kind": part("server").get("kind"), "server_version": part("server").get("version"),
             "policy": part("server").get("policy"), "scripted": part("server").get("scripted"),
             "harness_version": part("harness").get("version"), "package_version": part("package").get("version"),
             "package_git_sha": part("package").get("git_sha"),
             "group_id": group_id_of(art["summary"]), "tokenizer_sha256": art.get("tokenizer_sha256"),
             "tokenizer_revision": art.get("tokenizer_revision"), **counts}
    return _project(art["summary"], "summary", extra)


def task_row(art: dict[str, Any]) -> dict[str, Any]:
    """The `task` row of one rollout (task.json plus rollout_id)."""
    return _project(art["task"], "task", {"rollout_id": art["summary"]["rollout_id"]})


def visible_tests_row(art: dict[str, Any]) -> dict[str, Any]:
    """The `visible_tests` row of one rollout (text may be empty, never missing)."""
    return {"rollout_id": art["summary"]["rollout_id"], "task_id": art["task"].get("task_id"),
            "text": art["visible_tests"]}


def held_out_test_rows(art: dict[str, Any]) -> list[dict[str, Any]]:
    """One `held_out_tests` row per test case (none for environments without tests)."""
    doc = art["held_out_tests"]
    rid = art["summary"]["rollout_id"]
    return [{"rollout_id": rid, "task_id": doc.get("task_id"), "test_index": i,
             "input": t.get("input"), "output": t.get("output")}
            for i, t in enumerate(doc.get("tests") or [])]


def _message_keys(request: Any) -> list[str] | None:
    if isinstance(request, dict) and isinstance(request.get("messages"), list):
        return [_dumps(m) for m in request["messages"]]
    return None


def _lcp_list(a: Sequence[str], b: Sequence[str]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _strip_response(response: Any) -> Any:
    if not isinstance(response, dict):
        return response
    out = {k: v for k, v in response.items() if k not in ("prompt_token_ids", "prompt_logprobs")}
    choices = out.get("choices")
    if isinstance(choices, list):
        new = []
        for ch in choices:
            if isinstance(ch, dict):
                ch = {k: v for k, v in ch.items() if k not in ("token_ids", "prompt_token_ids", "prompt_logprobs")}
                if ch.get("logprobs") is not None:
                    ch["logprobs"] = None
            new.append(ch)
        out["choices"] = new
    return out


def response_message(response: Any) -> Any:
    """The first choice's message without its null fields (what harnesses append to their history).

    Args:
        response: a chat-completion response (parsed JSON).

    Returns:
        The message dict, or None when the response has no message.
    """
    if isinstance(response, dict) and isinstance(response.get("choices"), list) and response["choices"]:
        first = response["choices"][0]
        if isinstance(first, dict) and isinstance(first.get("message"), dict):
            return {k: v for k, v in first["message"].items() if v is not None}
    return None


def call_answer(call: dict[str, Any]) -> Any:
    """A recorded call's answer as a chat assistant message, without its null fields (every API:
    `wire.records.call_answer_chat`).

    Args:
        call: a trace record.

    Returns:
        The message dict (null fields left out), or None when the call has none.
    """
    answer = call_answer_chat(call)
    return {k: v for k, v in answer.items() if v is not None} if isinstance(answer, dict) else None


def call_chat_messages(call: dict[str, Any]) -> tuple[list[Any] | None, Any]:
    """A recorded call's request as chat messages and tools (every API: `wire.records.call_request_chat`).

    Args:
        call: a trace record.

    Returns:
        ``(messages, tools)``; messages None when the request has no conversation, tools None when none.
    """
    messages, tools = call_request_chat(call)
    return messages, tools or None


def trace_rows(art: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """One `trace` row per captured call, messages delta-encoded, token arrays left out.

    A call's messages are compared with each earlier call's messages followed by that call's
    response message without its null fields (what a harness appends before its next call); the
    longest exact common
    prefix is left out of `request_json` and named by `messages_prefix_call_index` /
    `messages_prefix_len`.

    Args:
        art: the documents from `read_artifact`.

    Returns:
        ``(rows, n_cut)``: the rows and how many cells were cut to the cell limit.
    """
    rid = art["summary"]["rollout_id"]
    seen: list[tuple[int, list[str]]] = []
    rows, n_cut = [], 0
    for call in art["trace"].get("calls", []):
        req = call.get("request")
        keys = _message_keys(req)
        prefix_idx, prefix_len = -1, 0
        if keys:
            for idx, earlier in reversed(seen):
                n = _lcp_list(earlier, keys)
                if n > prefix_len:
                    prefix_idx, prefix_len = idx, n
            if prefix_len:
                req = dict(req, messages=req["messages"][prefix_len:])
        response = _strip_response(call.get("response"))
        request_json, cut1 = cut_text(_dumps(req))
        response_json, cut2 = cut_text(_dumps(response))
        if cut1 or cut2:
            n_cut += int(cut1) + int(cut2)
            log.warning("rollout %s call %s: request/response JSON over %d bytes; cut with a marker",
                        rid, call.get("index"), MAX_CELL_BYTES)
        if keys and not cut1:  # a cut request can never be a prefix source
            message = response_message(response)
            seen.append((call.get("index", len(seen)), keys + ([_dumps(message)] if message and not cut2 else [])))
        extra = {
            "rollout_id": rid,
            "n_prompt_ids": len(call.get("prompt_token_ids") or []),
            "n_completion_ids": len(call.get("completion_token_ids") or []),
            "messages_prefix_call_index": prefix_idx,
            "messages_prefix_len": prefix_len,
            "request_json": request_json,
            "response_json": response_json,
            "truncated": bool(cut1 or cut2),
            "notes": call.get("notes") or [],
        }
        rows.append(_project(call, "trace", extra))
    return rows, n_cut


def _seq_list(doc: dict[str, Any]) -> list[dict[str, Any]]:
    seqs = doc.get("sequences") if isinstance(doc, dict) else None
    return seqs if isinstance(seqs, list) else []


def sequence_rows(art: dict[str, Any]) -> list[dict[str, Any]]:
    """One `sequences` row per sequence of rollout.json (labelled, never filtered).

    Args:
        art: the documents from `read_artifact`.

    Returns:
        The rows, with the rollout's rewards copied in.
    """
    summary = art["summary"]
    rows = []
    for i, s in enumerate(_seq_list(art["rollout"])):
        ids = s.get("input_ids") or []
        row = sequence_row(s, i)
        rows.append({"rollout_id": summary["rollout_id"], "sequence_index": i, "group_id": group_id_of(summary),
                     **row, "env_reward": summary.get("env_reward"),
                     "reward_after_penalties": summary.get("reward_after_penalties")})
        nbytes = len(ids) * 9
        if nbytes > MAX_ROW_BYTES:
            log.warning("rollout %s sequence %d: about %d bytes, over the %d-byte row limit of the Hub viewer; "
                        "kept whole (token arrays are never cut)", summary["rollout_id"], i, nbytes, MAX_ROW_BYTES)
    return rows


def _text(value: Any) -> str | None:
    """A message field as text: strings as they are, text parts joined, anything else as JSON."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in value):
        return "".join(p["text"] for p in value)
    return _dumps(value)


def chat_message(message: Any) -> dict[str, Any]:
    """One chat message in the `conversations` config's typed shape (`configs.MESSAGE_TYPE`).

    Args:
        message: a message as a harness sent it or a server answered it (any JSON value; a
            non-dict becomes a message with no role and its JSON as content).

    Returns:
        ``{"role", "content", "reasoning_content", "tool_calls", "tool_call_id"}``: text fields as
        strings or None (list-of-parts content joined; other values as JSON text), tool calls as
        ``{"id", "type", "function": {"name", "arguments"}}`` with arguments as JSON text.
    """
    if not isinstance(message, dict):
        return {"role": None, "content": _text(message), "reasoning_content": None, "tool_calls": None,
                "tool_call_id": None}
    calls = None
    if isinstance(message.get("tool_calls"), list):
        calls = []
        for call in message["tool_calls"]:
            call = call if isinstance(call, dict) else {}
            function = call.get("function")
            fn = function if isinstance(function, dict) else {}
            calls.append({"id": _text(call.get("id")), "type": _text(call.get("type")),
                          "function": {"name": _text(fn.get("name")), "arguments": _text(fn.get("arguments"))}})
    reasoning = message_reasoning(message)
    if reasoning is None:  # no text in any field: what there is (an empty string, a non-text value) as it is
        reasoning = message.get("reasoning_content", message.get("reasoning"))
    return {"role": _text(message.get("role")), "content": _text(message.get("content")),
            "reasoning_content": _text(reasoning), "tool_calls": calls,
            "tool_call_id": _text(message.get("tool_call_id"))}


def conversation_rows(art: dict[str, Any], seq_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One `conversations` row per trainable sequence: its last call's messages + the answer.

    At capture level `text` (no token ids, so no sequence is trainable) every sequence gets its row:
    a conversation needs text only.

    Args:
        art: the documents from `read_artifact`.
        seq_rows: the rollout's `sequences` rows (from `sequence_rows`).

    Returns:
        The rows; a trainable sequence whose last call has no chat request (a `/v1/completions`
        call) gets no row, and that is logged.
    """
    calls = {c.get("index"): c for c in art["trace"].get("calls", []) if isinstance(c, dict)}
    summary = art["summary"]
    rows = []
    text_level = summary.get("capture_level") == "text"
    for seq in seq_rows:
        if not (seq["trainable"] or text_level) or not seq["node_ids"]:
            continue
        call = calls.get(seq["node_ids"][-1])
        if call is None:  # trace.json and rollout.json disagree: the trace config's own checks name it
            log.warning("rollout %s sequence %d: its last call (index %d) is not in trace.json; no conversations row",
                        summary["rollout_id"], seq["sequence_index"], seq["node_ids"][-1])
            continue
        chat_messages, chat_tools = call_chat_messages(call)  # every API read as chat (wire.records)
        if chat_messages is None and not seq["trainable"]:  # a text-level completions call: no chat to give
            log.info("rollout %s sequence %d: its last call reads as no chat conversation; no conversations row",
                     summary["rollout_id"], seq["sequence_index"])
            continue
        if chat_messages is None:  # every trainable sequence has its row: a gap here is never silent
            raise ArtifactError(f"rollout {summary['rollout_id']} sequence {seq['sequence_index']}: its last call "
                                f"(index {seq['node_ids'][-1]}, {call.get('endpoint')}) reads as no chat "
                                "conversation, so the conversations config would lose it")
        request = {"messages": chat_messages, "tools": chat_tools}
        answer = call_answer(call)
        messages = [chat_message(m) for m in request["messages"]] + ([chat_message(answer)] if answer else [])
        size = sum(len(m["content"] or "") + len(m["reasoning_content"] or "") for m in messages)
        if size > MAX_ROW_BYTES:  # kept whole (a trainer needs it), but said
            log.warning("rollout %s conversation %d: about %d characters, over the %d-byte row limit of the Hub "
                        "viewer; kept whole", summary["rollout_id"], seq["sequence_index"], size, MAX_ROW_BYTES)
        rows.append({"rollout_id": summary["rollout_id"], "sequence_index": seq["sequence_index"],
                     "group_id": seq["group_id"], "messages": messages,
                     "tools": _dumps(request["tools"]) if request.get("tools") is not None else None,
                     "env_reward": summary.get("env_reward"),
                     "reward_after_penalties": summary.get("reward_after_penalties")})
    return rows


def _f32(values: Iterable[Any] | None) -> np.ndarray:
    return np.asarray([np.nan if v is None else v for v in (values or [])], dtype=np.float32)


def _lcp(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


def _same_f32(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


def turn_rows(art: dict[str, Any], seq_rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """One `turns` row per turn of turns.json, tokens stored once (see the module docstring).

    Args:
        art: the documents from `read_artifact`.
        seq_rows: this rollout's `sequences` rows (from `sequence_rows`).

    Returns:
        ``(rows, n_unique_tokens)``: the rows and the rollout's distinct token positions.
    """
    rid = art["summary"]["rollout_id"]
    seqs = [(r["sequence_index"], np.asarray(r["input_ids"], np.int32), _f32(r["logprobs"]))
            for r in seq_rows]
    earlier: list[tuple[int, np.ndarray]] = []
    rows, unique = [], 0
    for t in art["turns"].get("turns", []):
        prompt = np.asarray(t.get("prompt_ids") or [], np.int32)
        out = np.asarray(t.get("output_ids") or [], np.int32)
        logps = _f32(t.get("per_token_logps"))
        n_p, n_o = len(prompt), len(out)
        trained = bool(t.get("trained"))
        mask = t.get("mask")
        derived = np.concatenate([np.zeros(n_p, np.int8), np.ones(n_o, np.int8)])
        mask_inline = [] if mask is None or np.array_equal(np.asarray(mask, np.int8), derived) else mask
        seq_index = -1
        if n_p + n_o and len(logps) == n_o:
            for idx, ids, lps in seqs:
                if (len(ids) >= n_p + n_o and np.array_equal(ids[:n_p], prompt)
                        and np.array_equal(ids[n_p:n_p + n_o], out) and _same_f32(lps[n_p:n_p + n_o], logps)):
                    seq_index = idx
                    break
        full = np.concatenate([prompt, out])
        prefix_idx, prefix_len = -1, 0
        for call_index, prev in reversed(earlier):
            n = _lcp(prev, prompt)
            if n > prefix_len:
                prefix_idx, prefix_len = call_index, n
        unique += n_p - prefix_len + n_o
        call_index = t.get("call_index")
        earlier.append((call_index, full))
        inline = seq_index < 0
        rows.append({
            "rollout_id": rid,
            "turn": t.get("turn"),
            "call_index": call_index,
            "role": t.get("role"),
            "trained": trained,
            "tool_calls": t.get("tool_calls") or [],
            "n_prompt_ids": n_p,
            "n_output_ids": n_o,
            "finish_reason": t.get("finish_reason"),
            "sequence_index": seq_index,
            "prefix_call_index": prefix_idx if inline else -1,
            "prefix_len": prefix_len if inline else 0,
            "prompt_ids_delta": prompt[prefix_len:] if inline else [],
            "output_ids": out if inline else [],
            "per_token_logps": logps if inline else [],
            "mask": mask_inline,
        })
    return rows, unique


def _split_parts(text: str, limit: int) -> list[str]:
    """Split a text into parts of at most `limit` UTF-8 bytes, at line ends where possible."""
    parts: list[str] = []
    buf: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        n = len(line.encode("utf-8"))
        while n > limit:  # one giant line: split by characters
            if buf:
                parts.append("".join(buf))
                buf, size = [], 0
            step = limit // 4
            parts.append(line[:step])
            line = line[step:]
            n = len(line.encode("utf-8"))
        if size + n > limit and buf:
            parts.append("".join(buf))
            buf, size = [], 0
        buf.append(line)
        size += n
    if buf or not parts:
        parts.append("".join(buf))
    return parts


def _header_end(text: str) -> int:
    """Length of the sample's header: the lines before its first section (``## ``) or code fence."""
    end = len(text)
    for mark in ("\n## ", "\n```"):
        i = text.find(mark, 0, _HEADER_MAX + len(mark))
        if 0 <= i < end:
            end = i + 1
    if end > _HEADER_MAX:  # no section within reach: keep the first line only
        end = text.find("\n") + 1 or min(len(text), _HEADER_MAX)
    return min(end, _HEADER_MAX)


def preview_text(text: str, max_chars: int = PREVIEW_CHARS) -> tuple[str, bool]:
    """A viewer-sized preview of a rendered sample: its header, then the head and tail of the rest.

    The cut uses `rollout_dataset.render.truncate_middle`, whose marker says how many characters
    were cut. The header (the lines before the first ``## `` section or code fence: title, reward
    line) is kept whole when it fits in 2,000 characters and half of `max_chars`.

    Args:
        text: the whole samples.md.
        max_chars: characters of `text` kept (the marker is extra); at least 100.

    Returns:
        ``(preview, was_cut)``; ``preview == text`` when it fits.

    Raises:
        ValueError: `max_chars` below 100.
    """
    from rollout_dataset.render import truncate_middle

    if max_chars < 100:
        raise ValueError(f"preview max_chars must be >= 100, got {max_chars}")
    if len(text) <= max_chars:
        return text, False
    head = _header_end(text)
    head = min(head, max_chars // 2)
    return text[:head] + truncate_middle(text[head:], max_chars - head), True


def sample_rows(art: dict[str, Any], mode: str = "preview", limit: int = MAX_CELL_BYTES,
                preview_chars: int = PREVIEW_CHARS) -> list[dict[str, Any]]:
    """The `samples` rows of one rollout.

    Args:
        art: the documents from `read_artifact` (uses ``samples`` and the summary's rollout_id).
        mode: ``"preview"``: one row, header + head + tail within `preview_chars`; ``"full"``: samples.md
            split into parts of at most `limit` bytes at line ends where possible (lossless).
        limit: the byte budget of a full-mode part.
        preview_chars: characters of samples.md kept by a preview.

    Returns:
        Row dicts with ``rollout_id``, ``part``, ``text``, ``truncated``, ``full_chars``.

    Raises:
        ValueError: unknown mode, or `preview_chars` below 100.
    """
    if mode not in SAMPLES_MODES:
        raise ValueError(f"samples mode {mode!r} unknown; valid: {', '.join(SAMPLES_MODES)}")
    rid = art["summary"]["rollout_id"]
    text = art["samples"]
    if mode == "preview":
        preview, cut = preview_text(text, preview_chars)
        return [{"rollout_id": rid, "part": 0, "text": preview, "truncated": cut, "full_chars": len(text)}]
    return [{"rollout_id": rid, "part": i, "text": p, "truncated": False, "full_chars": len(text)}
            for i, p in enumerate(_split_parts(text, limit))]


def rollout_rows(art: dict[str, Any], samples: str = "preview",
                 preview_chars: int = PREVIEW_CHARS) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int]]:
    """Every config's rows for one rollout.

    Args:
        art: the documents from `read_artifact`.
        samples: the `samples` mode, ``"preview"`` or ``"full"`` (see `sample_rows`).
        preview_chars: characters of samples.md kept by a preview.

    Returns:
        ``(rows_by_config, stats)`` where stats holds ``cut_cells`` and ``unique_tokens``.
    """
    seqs = sequence_rows(art)
    turns, unique = turn_rows(art, seqs)
    trace, n_cut = trace_rows(art)
    held = held_out_test_rows(art)
    sample = sample_rows(art, samples, preview_chars=preview_chars)
    conversations = conversation_rows(art, seqs)
    counts: dict[str, int | str] = {"n_sequences": len(seqs), "n_conversations": len(conversations), "n_trace_rows": len(trace), "n_turn_rows": len(turns),
              "n_held_out_rows": len(held), "n_sample_rows": len(sample), "samples_mode": samples,
              "n_cut_cells": n_cut, "n_unique_tokens": unique,
              "longest_sequence_tokens": max((len(r["input_ids"]) for r in seqs), default=0)}
    rows = {
        "summary": [summary_row(art, counts)],
        "task": [task_row(art)],
        "visible_tests": [visible_tests_row(art)],
        "held_out_tests": held,
        "trace": trace,
        "turns": turns,
        "sequences": seqs,
        "conversations": conversations,
        "samples": sample,
    }
    return rows, {"cut_cells": n_cut, "unique_tokens": unique}
