"""Each rollout as a session of the Hub's agent-trace viewer (Session Trace Simple Format, STS JSONL).

A session is one JSONL file: a ``session`` header line, then one ``message`` line per message of
the rollout's **final agent conversation** (the request messages of its last agent call followed
by the message the model answered) with role, content, reasoningContent, toolCalls, toolCallId,
and, on assistant messages matched to the call that produced them, timestamp (epoch ms) and model.
Every line is validated against ``sts_line.schema.json``. The Hub picks one loader per repo, so
the sessions cannot sit next to the parquet configs: `build` writes them to the dataset folder's
``traces/`` (never pushed to the dataset repo) and `rollout_dataset.hub.push` sends them to a companion repo
(``<repo>-traces`` by default).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rollout_dataset.builder.rows import call_answer, call_chat_messages, chat_message
from rollout_dataset.files import write_text_atomic

__all__ = ["TRACES_DIR", "SESSIONS_DIR", "final_agent_call", "session_lines", "session_messages",
           "validate_session", "write_session", "traces_repo_card"]

#: the dataset folder's traces folder (the companion repo's root), and where sessions go inside it.
TRACES_DIR = "traces"
SESSIONS_DIR = "sessions"


def final_agent_call(art: dict[str, Any]) -> dict[str, Any] | None:
    """The trace record of the rollout's last agent call that was kept (not discarded).

    Args:
        art: the documents from `read_artifact`.

    Returns:
        The call, or None when the rollout has no agent call with chat messages.
    """
    calls = {c.get("index"): c for c in art["trace"].get("calls", []) if isinstance(c, dict)}
    nodes = [n for n in (art["rollout"].get("calls") or []) if isinstance(n, dict)
             and n.get("role", "agent") == "agent" and not n.get("discarded")]
    for node in sorted(nodes, key=lambda n: n.get("index", -1), reverse=True):
        call = calls.get(node.get("index"))
        if call and isinstance(call.get("request"), dict) and isinstance(call["request"].get("messages"), list):
            return call
    return None


def _sts_message(message: dict[str, Any], timestamp: int | None, model: str | None) -> dict[str, Any]:
    m = chat_message(message)
    out: dict[str, Any] = {"role": m["role"] or "unknown", "content": m["content"]}
    if m["reasoning_content"] is not None:
        out["reasoningContent"] = m["reasoning_content"]
    if m["tool_calls"]:
        out["toolCalls"] = [{"id": c["id"], "function": {"name": c["function"]["name"],
                                                         "arguments": c["function"]["arguments"]}}
                            for c in m["tool_calls"]]
    if m["tool_call_id"] is not None:
        out["toolCallId"] = m["tool_call_id"]
    if timestamp is not None:
        out["timestamp"] = timestamp
    if model:
        out["model"] = model
    return {"type": "message", "message": out}


def session_lines(art: dict[str, Any], group_id: str | None = None) -> list[dict[str, Any]]:
    """The STS lines of one rollout.

    Args:
        art: the documents from `read_artifact`.
        group_id: the rollout's group (recorded in the header).

    Returns:
        Header + message lines; just the header when the rollout has no agent call with messages.
    """
    summary = art["summary"]
    reward = summary.get("env_reward")
    header = {"type": "session", "harness": f"rollout-dataset/{summary.get('harness') or 'unknown'}",
              "id": summary["rollout_id"],
              "name": f"{summary.get('task_id')}: reward {'n/a' if reward is None else f'{reward:g}'}, "
                      f"stop {summary.get('stop_reason')}",
              "rollout_id": summary["rollout_id"], "task_id": summary.get("task_id"), "group_id": group_id,
              "model": summary.get("model"), "env_reward": reward,
              "reward_after_penalties": summary.get("reward_after_penalties")}
    call = final_agent_call(art)
    if call is None:
        return [header]
    final = list(call_chat_messages(call)[0] or [])  # Anthropic Messages calls read as chat
    answer = call_answer(call)
    if answer:
        final.append(answer)
    # timestamps and model of assistant messages: the call that answered them, matched in order
    answered = []
    for c in sorted(art["trace"].get("calls", []), key=lambda c: c.get("index", 0)):
        msg = call_answer(c)
        if msg:
            ended = c.get("ended_at") or c.get("started_at")
            answered.append((chat_message(msg), int(ended * 1000) if isinstance(ended, (int, float)) else None,
                             (c.get("response") or {}).get("model")))
    lines, used = [header], 0
    for message in final:
        stamp = model = None
        if isinstance(message, dict) and message.get("role") == "assistant":
            want = chat_message(message)
            for k in range(used, len(answered)):
                if answered[k][0] == want:
                    _, stamp, model = answered[k]
                    used = k + 1
                    break
        lines.append(_sts_message(message if isinstance(message, dict) else {"content": message}, stamp,
                                  model if isinstance(model, str) else None))
    return lines


def session_messages(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat messages of a session, back in the `conversations` shape (the round trip).

    Args:
        lines: STS lines (header first).

    Returns:
        ``{"role", "content", "reasoning_content", "tool_calls", "tool_call_id"}`` dicts.
    """
    out = []
    for line in lines[1:]:
        m = line["message"]
        calls = [{"id": c.get("id"), "type": "function", "function": dict(c["function"])}
                 for c in m["toolCalls"]] if "toolCalls" in m else None
        out.append({"role": m["role"], "content": m.get("content"), "reasoning_content": m.get("reasoningContent"),
                    "tool_calls": calls, "tool_call_id": m.get("toolCallId")})
    return out


def validate_session(lines: list[dict[str, Any]], where: str = "session") -> None:
    """Check a session: every line against ``sts_line.schema.json``, one header first, then messages.

    Args:
        lines: the parsed lines.
        where: the file, for messages.

    Raises:
        SchemaValidationError: a line does not match (file, line path and reason named).
    """
    from rollout_dataset.errors import SchemaValidationError
    from rollout_dataset.schema import schema_errors

    failures = [(where, f"$[{i}]{p.lstrip('$')}", r) for i, line in enumerate(lines) for p, r in
                schema_errors(line, "sts_line")]
    if not lines or lines[0].get("type") != "session":
        failures.append((where, "$[0].type", "the first line must be the session header"))
    failures += [(where, f"$[{i}].type", "only the first line is a session header")
                 for i, line in enumerate(lines[1:], 1) if line.get("type") != "message"]
    if failures:
        raise SchemaValidationError(failures)


def write_session(art: dict[str, Any], dataset_dir: str | Path, group_id: str | None = None) -> Path:
    """Write one rollout's session to ``<dataset_dir>/traces/sessions/<rollout_id>.jsonl`` (validated).

    Args:
        art: the documents from `read_artifact`.
        dataset_dir: the dataset folder.
        group_id: the rollout's group.

    Returns:
        The file written.

    Raises:
        SchemaValidationError: the session does not validate (nothing is written).
    """
    lines = session_lines(art, group_id)
    path = Path(dataset_dir) / TRACES_DIR / SESSIONS_DIR / f"{art['summary']['rollout_id']}.jsonl"
    validate_session(lines, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
    return path


def traces_repo_card(dataset_repo: str | None, n_sessions: int, license: str = "apache-2.0") -> str:
    """README.md of the companion traces repo: tags for the trace viewer and a link back.

    Args:
        dataset_repo: the parquet dataset's repo id (None: not pushed).
        n_sessions: sessions in the repo.
        license: a Hub license id.

    Returns:
        The README text.
    """
    link = f"[{dataset_repo}](https://huggingface.co/datasets/{dataset_repo})" if dataset_repo else "its dataset"
    return (f"---\nlicense: {license}\ntags:\n- agent-traces\n- rollout-dataset\nconfigs:\n- config_name: default\n"
            f"  data_files:\n  - split: train\n    path: {SESSIONS_DIR}/*.jsonl\n---\n\n"
            f"# Agent sessions of {dataset_repo or 'a rollout-dataset dataset'}\n\n"
            f"{n_sessions} rollout(s), one session each in the Session Trace Simple Format (STS JSONL), for the "
            f"Hub's agent-trace viewer: the final agent conversation of each rollout. The token-exact data "
            f"(sequences, masks, logprobs, rewards) is in {link}; join on the session `id` (= `rollout_id`).\n")
