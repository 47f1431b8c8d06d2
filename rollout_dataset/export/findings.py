"""Semantic findings about a rollout: what a person must know before training on it.

A finding is a dict ``{"level": "ERROR"|"WARN"|"INFO", "code": str, "message": str}`` plus
``call_index`` (the arrival index of the call it is about) and ``position`` (a token position) when
they apply. ``ERROR`` on a call makes every sequence through that call untrainable; ``WARN`` and
``INFO`` never gate anything.

Codes (one place, so the dataset card and ``show`` can explain them):

========================  =======  =============================================================
code                      level    meaning
========================  =======  =============================================================
ids_missing               ERROR    capture level ``tokens`` but a call has no server token ids
empty_ids                 ERROR    a call's prompt or sampled ids are an empty list
length_mismatch           ERROR    id counts disagree with ``usage`` or with each other
logprobs_count            ERROR    per-token logprobs present but not one per sampled id
logprobs_missing          WARN     no per-token logprobs (a trainer must recompute them)
truncated                 WARN     finish reason ``length``: the output hit max_tokens
conversation_partial      WARN     a Responses request continues a stored response (``previous_response_id``):
                                   its messages (and `conversations` row) lack the turns before it
sampling_incomparable     WARN     temperature/top_p != 1, top_k set, or unknown logprobs mode
retokenization_skew       WARN     request re-rendered through the chat template != server ids
call_error                WARN     the call failed (upstream error, disconnect) yet got a response
call_cut                  WARN     a call was cut before its answer ended (harness killed, timeout,
                                   disconnect): on no sequence, its partial answer in ``cut_calls``
trace_note                INFO     a note the proxy left on the record
retokenization_unavailable INFO    the chat template could not re-render the request
prefix_break              INFO     a new root that continues an earlier conversation, with cause
reasoning_ambiguous       INFO     a sent-back assistant turn holds reasoning a template may read two ways
no_generation_calls       WARN     the trace holds no generation call at all
eval_capture              INFO     capture level below ``tokens``: nothing is trainable
========================  =======  =============================================================
"""

from __future__ import annotations

import math
from typing import Any, Callable

from rollout_dataset.export.breaks import BreakCause, explain_break
from rollout_dataset.graph import RolloutGraph, TurnNode, normalise_message
from rollout_dataset.reasoning import odd_reasoning
from rollout_dataset.tokenizers import common_prefix, template_messages
from rollout_dataset.wire.records import call_api
from rollout_dataset.wire.chat_tools import template_tools

__all__ = [
    "ERROR",
    "WARN",
    "INFO",
    "LEVELS",
    "FINDING_CODES",
    "LOGPROBS_MISSING",
    "finding",
    "call_findings",
    "sampling_findings",
    "stored_conversation_findings",
    "retokenization_findings",
    "render_prompt_ids",
    "prefix_break_findings",
    "prefix_breaks",
    "has_error",
]

ERROR, WARN, INFO = "ERROR", "WARN", "INFO"

#: the code of a call with no per-token logprobs (its sampled positions hold 0.0 in `sequences`)
LOGPROBS_MISSING = "logprobs_missing"
LEVELS = (ERROR, WARN, INFO)

FINDING_CODES: dict[str, str] = {
    "ids_missing": ERROR,
    "empty_ids": ERROR,
    "length_mismatch": ERROR,
    "logprobs_count": ERROR,
    LOGPROBS_MISSING: WARN,
    "truncated": WARN,
    "conversation_partial": WARN,
    "sampling_incomparable": WARN,
    "retokenization_skew": WARN,
    "call_error": WARN,
    "call_cut": WARN,
    "trace_note": INFO,
    "retokenization_unavailable": INFO,
    "prefix_break": INFO,
    "reasoning_ambiguous": INFO,
    "no_generation_calls": WARN,
    "eval_capture": INFO,
}


def finding(code: str, message: str, *, call_index: int | None = None, position: int | None = None) -> dict[str, Any]:
    """Make one finding; its level comes from ``FINDING_CODES``.

    Args:
        code: one of ``FINDING_CODES``.
        message: what happened and what to do, naming the call and values.
        call_index: the arrival index of the call it is about.
        position: a token position, when one applies.

    Returns:
        The finding dict.

    Raises:
        KeyError: an unknown code.
    """
    out: dict[str, Any] = {"level": FINDING_CODES[code], "code": code, "message": message}
    if call_index is not None:
        out["call_index"] = int(call_index)
    if position is not None:
        out["position"] = int(position)
    return out


def has_error(findings: list[dict[str, Any]]) -> bool:
    """Whether any finding is at level ERROR."""
    return any(f.get("level") == ERROR for f in findings)


def _differs(value: Any, default: float) -> bool:
    try:
        return not math.isclose(float(value), default)
    except (TypeError, ValueError):
        return True


def stored_conversation_findings(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A ``conversation_partial`` finding when a Responses request continues a stored response.

    With ``previous_response_id`` (vLLM with its response store on) the request's ``input`` holds only
    the new items: the server prepends the stored conversation, so the prompt ids hold it, but the
    record's messages, and the `conversations` row built from them, do not.

    Args:
        record: the call's trace record.

    Returns:
        ``[]``, or the one finding naming the call and the stored response's id.
    """
    request = record.get("request")
    if call_api(record) != "responses" or not isinstance(request, dict):
        return []
    previous = request.get("previous_response_id")
    if previous is None or previous == "":
        return []
    i = record.get("index")
    shown = repr(previous) if len(repr(previous)) <= 80 else repr(previous)[:77] + "..."
    return [finding("conversation_partial",
                    f"call {i}: the request continues stored response {shown} (previous_response_id): its "
                    "messages hold only the new items, so its conversation (and conversations row) lacks the turns "
                    "before them" + ("; its token ids hold them" if record.get("prompt_token_ids") else ""),
                    call_index=i if isinstance(i, int) else None)]


def sampling_findings(node: TurnNode) -> list[dict[str, Any]]:
    """Sampling parameters that make the captured logprobs incomparable to a trainer's recompute.

    vLLM reports raw logprobs (before temperature, top-p, top-k) unless run with
    ``--logprobs-mode processed_logprobs``; the mode is a server flag the trace cannot see, so any
    non-neutral sampling is flagged.

    Args:
        node: the call.

    Returns:
        Zero or one ``sampling_incomparable`` finding.
    """
    params = node.effective_sampling_params or node.requested_sampling_params
    odd = []
    for name in ("temperature", "top_p"):
        if params.get(name) is not None and _differs(params[name], 1.0):
            odd.append(f"{name}={params[name]}")
    top_k = params.get("top_k")
    if top_k is not None and top_k not in (-1, 0):
        odd.append(f"top_k={top_k}")
    mode = params.get("logprobs_mode")
    if mode is not None and mode not in ("raw_logprobs", "processed_logprobs"):
        odd.append(f"logprobs_mode={mode} (unknown)")
    if not odd or mode == "processed_logprobs":
        return []
    return [
        finding(
            "sampling_incomparable",
            f"call {node.index} sampled with {', '.join(odd)}: the server's logprobs mode is "
            "unknown (vLLM reports raw logprobs by default), so these logprobs are not comparable "
            "to a trainer's recompute; sample with temperature=1, top_p=1, no top_k, or run vLLM "
            "with --logprobs-mode processed_logprobs",
            call_index=node.index,
        )
    ]


def call_findings(node: TurnNode, *, tokens_expected: bool) -> list[dict[str, Any]]:
    """Per-call checks: ids, lengths, logprobs, truncation, sampling, errors, proxy notes.

    Args:
        node: the call.
        tokens_expected: the rollout's capture level is ``tokens``.

    Returns:
        The call's findings (without retokenization skew; see ``retokenization_findings``).
    """
    i = node.index
    out: list[dict[str, Any]] = []
    if node.has_ids:
        if not node.prompt_ids:
            out.append(finding("empty_ids", f"call {i}: prompt_token_ids is an empty list", call_index=i))
        if not node.sampled_ids:
            out.append(finding("empty_ids", f"call {i}: completion_token_ids is an empty list", call_index=i))
        usage = node.usage or {}
        for key, ids, field_name in (
            ("prompt_tokens", node.prompt_ids, "prompt_token_ids"),
            ("completion_tokens", node.sampled_ids, "completion_token_ids"),
        ):
            expected = usage.get(key)
            if isinstance(expected, int) and expected != len(ids):
                out.append(
                    finding(
                        "length_mismatch",
                        f"call {i}: {field_name} has {len(ids)} ids but usage.{key} says {expected}",
                        call_index=i,
                    )
                )
        lps = node.sampled_logprobs
        if lps is None:
            out.append(
                finding(
                    LOGPROBS_MISSING,
                    f"call {i}: no per-token logprobs for its {len(node.sampled_ids)} sampled ids; "
                    "a trainer must recompute them",
                    call_index=i,
                )
            )
        elif len(lps) != len(node.sampled_ids):
            out.append(
                finding(
                    "logprobs_count",
                    f"call {i}: {len(lps)} per-token logprobs for {len(node.sampled_ids)} sampled ids",
                    call_index=i,
                    position=len(node.prompt_ids) + min(len(lps), len(node.sampled_ids)),
                )
            )
    elif tokens_expected:
        out.append(
            finding(
                "ids_missing",
                f"call {i} ({node.endpoint}): the server returned no prompt/completion token ids "
                f"(record capture_level={node.capture_level}); it cannot be trained on",
                call_index=i,
            )
        )
    if node.finish_reason == "length":
        out.append(
            finding(
                "truncated",
                f"call {i}: finish_reason 'length' after {len(node.sampled_ids)} sampled ids "
                f"(max_tokens={node.effective_sampling_params.get('max_tokens')}): the output was cut",
                call_index=i,
            )
        )
    out.extend(sampling_findings(node))
    if node.error:
        out.append(
            finding(
                "call_error",
                f"call {i}: {node.error.get('kind')}: {node.error.get('message')}",
                call_index=i,
            )
        )
    for note in node.notes:
        out.append(finding("trace_note", f"call {i}: {note}", call_index=i))
    for m, message in enumerate(node.request_messages):
        odd = odd_reasoning(message)
        if odd:
            out.append(finding("reasoning_ambiguous", f"call {i}: request message {m} (assistant) holds {odd}; the "
                               "chat template renders it as it decides: the prompt ids show what the model saw",
                               call_index=i))
    return out


def render_prompt_ids(node: TurnNode, tokenizer: Any, request_kwargs: dict[str, Any] | None = None) -> list[int]:
    """Re-render a call's request through the tokenizer's chat template.

    Args:
        node: the call (its request messages and tools).
        tokenizer: a Hugging Face tokenizer with a chat template.
        request_kwargs: ``chat_template_kwargs`` the request carried.

    Returns:
        The rendered prompt ids (``add_generation_prompt=True``).
    """
    rendered = tokenizer.apply_chat_template(
        template_messages(node.request_messages),
        tools=template_tools(node.request_tools),
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
        **(request_kwargs or {}),
    )
    if hasattr(rendered, "keys") and "input_ids" in rendered:
        rendered = rendered["input_ids"]
    return [int(x) for x in rendered]


def retokenization_findings(node: TurnNode, tokenizer: Any, request_kwargs: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Compare the re-rendered request with the server's prompt ids; the server's ids always win.

    Args:
        node: the call (needs token ids).
        tokenizer: a Hugging Face tokenizer with a chat template.
        request_kwargs: ``chat_template_kwargs`` from the request.

    Returns:
        A ``retokenization_skew`` finding with the first differing position, a
        ``retokenization_unavailable`` one when rendering failed, or nothing when they agree.
    """
    if not node.has_ids or not node.request_messages:
        return []
    i = node.index
    try:
        rendered = render_prompt_ids(node, tokenizer, request_kwargs)
    except Exception as exc:  # noqa: BLE001 - a template may reject any message shape
        return [finding("retokenization_unavailable", f"call {i}: chat template failed: {exc}", call_index=i)]
    server = node.prompt_ids
    if rendered == server:
        return []
    pos = next((k for k, (a, b) in enumerate(zip(rendered, server)) if a != b), min(len(rendered), len(server)))
    return [
        finding(
            "retokenization_skew",
            f"call {i}: the request re-rendered through the chat template gives {len(rendered)} ids, "
            f"the server's prompt has {len(server)}; first difference at position {pos} "
            f"(rendered {rendered[pos] if pos < len(rendered) else 'end'}, server "
            f"{server[pos] if pos < len(server) else 'end'}). The server's ids are kept",
            call_index=i,
            position=pos,
        )
    ]


class _RequestNorms:
    """Normalised request messages per call, each computed from what is new since the last one.

    Consecutive calls of an agent loop resend the same history plus a few messages, so the leading
    messages equal to the previously computed call's (a C-level list comparison) reuse its
    normalised forms; only the rest go through ``normalise_message``. (Python equality is the
    test, so a resent message that differs only by ``1`` vs ``1.0`` in a number keeps the earlier
    normal form; JSON from one harness never does that.)
    """

    def __init__(self, nodes: list[TurnNode]) -> None:
        self._nodes = nodes
        self._norms: dict[int, tuple] = {}
        self._last: int | None = None

    def _shared(self, messages: list[Any]) -> int:
        if self._last is None:
            return 0
        prev = self._nodes[self._last].request_messages
        n = min(len(prev), len(messages))
        if messages[:n] == prev[:n]:
            return n
        return next(i for i in range(n) if not (messages[i] is prev[i] or messages[i] == prev[i]))

    def _compute(self, k: int) -> None:
        messages = self._nodes[k].request_messages
        n = self._shared(messages)
        prev_norm = self._norms[self._last] if n and self._last is not None else ()  # n > 0: there is a last
        self._norms[k] = prev_norm[:n] + tuple(normalise_message(m) for m in messages[n:])
        self._last = k

    def norm(self, k: int) -> tuple:
        """The normalised request messages of the call at position ``k``."""
        if k not in self._norms:
            self._compute(k)
        return self._norms[k]


def prefix_break_findings(graph: RolloutGraph, tokenizer: Any = None) -> list[dict[str, Any]]:
    """An INFO finding for each new root that continues an earlier conversation, with the cause.

    Args:
        graph: the prefix graph.
        tokenizer: decodes ids and renders chat (optional; see `prefix_breaks`).

    Returns:
        The findings, in arrival order.
    """
    return prefix_breaks(graph, tokenizer)[0]


def prefix_breaks(graph: RolloutGraph, tokenizer: Any = None,
                  kwargs_of: Callable[[int], dict[str, Any]] | None = None
                  ) -> tuple[list[dict[str, Any]], dict[int, BreakCause]]:
    """Each new root that continues an earlier conversation: its finding and, in token mode, its cause.

    When the messages extend an earlier call's history and the prompt ids do not hold its prompt +
    sampled ids, the cause is read from the ids (`rollout_dataset.export.breaks.explain_break`:
    template or harness dropped the reasoning, whitespace drift at a tool call, an end-of-turn token
    re-rendered, an all-reasoning reply, a changed reply, history re-rendered); a think block alone
    names nothing. Other causes: the system prompt changed while the rest of the history grew; the
    history was rewritten (a shared start, then different messages). A root sharing nothing with
    earlier calls (a title generator, an unrelated conversation) gets no finding, nor one that holds an
    earlier call's messages and reply with other messages put in front (terminus-2's handoff to a new
    conversation; the proxy's on-policy mode reads it ``exact``/``reply_pasted``).

    Args:
        graph: the prefix graph.
        tokenizer: decodes ids (``decode``) and renders chat (``apply_chat_template``); without one a
            break at the reply is ``reply_changed``.
        kwargs_of: a call index's ``chat_template_kwargs``.

    Returns:
        ``(findings in arrival order, {root call index: BreakCause})``.
    """
    nodes = graph.nodes()
    causes: dict[int, BreakCause] = {}
    if len(graph.roots()) < 2:
        return [], causes
    requests = _RequestNorms(nodes)  # normalised lazily: most roots stop at the call just before
    norm_req = requests.norm
    hist_cache: dict[int, tuple] = {}

    def norm_hist(k: int) -> tuple:
        if k not in hist_cache:
            response = nodes[k].response_message
            hist_cache[k] = norm_req(k) + ((normalise_message(response),) if response else ())
        return hist_cache[k]

    out = []
    for pos, root in enumerate(nodes):
        if root.parent is not None or pos == 0:
            continue
        msgs = norm_req(pos)
        reply_at = next((i for i, m in enumerate(msgs) if m[0] == "assistant"), -1)  # the first reply
        best: tuple[int, int, int] | None = None  # (score, k, earlier position)
        pasted = False
        for e in range(pos - 1, -1, -1):
            if norm_req(e) == msgs:  # the same request again: a retry or resample, not a break
                best = None
                break
            hist = norm_hist(e)
            if len(hist) <= len(msgs) and msgs[: len(hist)] == hist:
                best = (3, len(hist), e)
                break
            if 0 < reply_at + 1 - len(hist) and msgs[reply_at + 1 - len(hist): reply_at + 1] == hist:
                pasted = True  # call e's conversation with other messages put in front (a handoff): a new one
                continue  # unless an earlier call's history is what it extends (score 3, further back)
            sys_changed = (
                len(hist) > 1 and len(msgs) > 1 and hist[0] != msgs[0]
                and hist[0][0] == "system" and msgs[0][0] == "system"
                and len(hist) <= len(msgs) and msgs[1 : len(hist)] == hist[1:]
            )
            if sys_changed:
                cand = (2, len(hist), e)
            else:
                k = common_prefix(hist, msgs)
                starts_with_system = bool(msgs) and msgs[0][0] == "system"
                if k >= 2 or (k >= 1 and not starts_with_system):
                    cand = (1, k, e)
                else:
                    continue
            if best is None or cand[:2] > best[:2]:
                best = cand
        if best is None or (pasted and best[0] < 3):
            continue
        score, k, e = best
        earlier = nodes[e]
        if score == 3 and graph.mode == "tokens":
            why = explain_break(earlier, root, tokenizer, kwargs_of(root.index) if kwargs_of else None)
            causes[root.index] = why
            cause = why.tagged
            detail = (f"its messages extend call {earlier.index}'s history but its prompt ids do not hold "
                      f"that call's sampled ids from position {why.position}")
        elif score == 3:
            cause = "the conversation continued but could not be linked"
            detail = f"its messages extend call {earlier.index}'s history"
        elif score == 2:
            cause = "system prompt changed"
            detail = f"its messages extend call {earlier.index}'s history after a different system message"
        else:
            cause = "history rewritten"
            detail = f"it shares {k} leading message(s) with call {earlier.index}, then differs"
        out.append(
            finding(
                "prefix_break",
                f"call {root.index} started a new root: {cause} ({detail})",
                call_index=root.index,
            )
        )
    return out, causes
