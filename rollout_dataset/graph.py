"""Trace records -> the rollout's prefix graph (roots, forks, discarded retries).

Every generation call (a chat/completions, completions or responses endpoint that got a response) becomes a
node. A node's parent is the earlier node whose prompt + sampled ids form the LONGEST exact token
prefix of this node's prompt ids; a node with none is a root. A fork is a node with two or more
children. A discarded node is a childless node whose sibling (same parent, or the same prompt)
continued: a retry or a resample the harness did not build on.

Nodes are taken in arrival order (``index``), and a node's parent must have ENDED before the node's
request arrived (`TurnNode.saw_end_of`, from the records' ``started_at``/``ended_at``): a call a
harness sent while another was in flight (overlapping calls) is a fork or a new root, never a
continuation of a call it did not see.

Finding the parent is linear in the rollout's total tokens: each node's prompt is hashed at most
once, incrementally (``hashlib`` ``update``/``copy``), and the running digest is looked up at the
lengths where some earlier node's full sequence ends; a hit is confirmed by an exact comparison.
When the previous call's full sequence is a prefix of the prompt (the agent-loop case), its saved
hash state is reused so only the new tokens are hashed. Sequences are indexed by their first token,
and hashing is lazy: a prompt whose first token starts no earlier sequence cannot have a parent and
is not hashed until a later prompt could extend it (so a rollout where every call starts a new
root, e.g. a template that re-renders history, costs no hashing). There is no all-pairs list
comparison.

Without token ids (capture level below ``tokens``) the same machinery runs over messages instead of
tokens: each request message and each response message is normalised (tool-call argument JSON
re-serialised with sorted keys, ids and empty content dropped) and interned to an integer, so the
structure is still right for eval rollouts.
"""

from __future__ import annotations

import functools
import bisect
import hashlib
import json
import logging
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from rollout_dataset.wire.records import call_answer_chat, call_request_chat

__all__ = [
    "TurnNode",
    "HarnessSession",
    "harness_session_tree",
    "RolloutGraph",
    "build_graph",
    "is_generation_record",
    "is_generation_endpoint",
    "cut_reason",
    "normalise_message",
    "iter_paths",
]

log = logging.getLogger(__name__)

_GENERATION_SUFFIXES = ("/chat/completions", "/completions", "/responses", "/v1/messages")


def is_generation_record(record: dict[str, Any]) -> bool:
    """Whether a trace record is a generation call that becomes a graph node.

    Args:
        record: one trace record (see ``trace_record.schema.json``).

    Returns:
        True for a chat/completions or completions call whose response arrived (a dict), is not
        an error (HTTP status below 400: an error body has nothing to train on) and was not cut
        before its answer ended (`cut_reason`: a cut call stays in the trace, named in findings).
    """
    status = record.get("status")
    return (is_generation_endpoint(record) and isinstance(record.get("response"), dict)
            and not (isinstance(status, int) and status >= 400) and cut_reason(record) is None)


def is_generation_endpoint(record: dict[str, Any]) -> bool:
    """Whether a trace record's endpoint is a generation endpoint (chat, completions, responses, messages)."""
    return str(record.get("endpoint") or "").rstrip("/").endswith(_GENERATION_SUFFIXES)


#: a call's answer that holds one of these finish reasons (or none) never ended
_UNENDED = (None, "in_progress")


def cut_reason(record: dict[str, Any]) -> dict[str, str] | None:
    """Why a generation call was cut before its answer ended, or None when it was not.

    A cut call failed (the proxy recorded an error: the harness left, the model server dropped or
    timed out, the proxy shut down) while its answer was unfinished: no finish reason arrived (a
    Responses stream still ``in_progress``), or no answer at all. An error answer (HTTP status 400
    or more) is not cut, nor is a whole answer whose client left after its last event.

    Args:
        record: one trace record.

    Returns:
        The record's ``error`` (``kind``, ``message``) when the call was cut, else None.
    """
    error = record.get("error")
    if not isinstance(error, dict) or not is_generation_endpoint(record):
        return None
    status = record.get("status")
    if isinstance(status, int) and status >= 400:
        return None
    if record.get("finish_reason") not in _UNENDED:
        return None
    return {"kind": str(error.get("kind")), "message": str(error.get("message"))}


@functools.lru_cache(maxsize=4096)
def _canonical_arguments(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except ValueError:
        return arguments.strip()


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                parts.append(str(part.get("text", part.get("content", ""))))
            else:
                parts.append(str(part))
        return "".join(parts).strip()
    return json.dumps(content, sort_keys=True, default=str)


def normalise_message(message: Any) -> tuple[Any, ...]:
    """A canonical, hashable form of one chat message, for the message-level fallback.

    Tool-call arguments are parsed and re-serialised with sorted keys; tool-call ids, reasoning
    fields (and an assistant text's leading ``<think>...</think>`` block) and empty content are ignored, and an assistant message that carries tool calls is
    compared by its tool calls only (some harnesses drop its text when they send it back).

    Args:
        message: a request message or a response message (a dict), or anything else.

    Returns:
        ``(role, text, tool_calls)``; equal tuples mean the same message.
    """
    if type(message) is dict and not message.get("tool_calls"):  # fast path: a plain text message
        content = message.get("content")
        if content is None or type(content) is str:
            role = str(message.get("role") or "assistant")
            if content and role == "assistant" and "</think>" in content and content.lstrip().startswith("<think>"):
                content = content.split("</think>", 1)[1]  # reasoning sent back as a think block, as in a field
            return (role, content.strip() if content else "", ())
    if not isinstance(message, dict):
        return ("?", json.dumps(message, sort_keys=True, default=str), ())
    role = str(message.get("role") or "assistant")
    calls = message.get("tool_calls") or []
    if calls and role != "tool":
        norm = []
        for call in calls:
            fn = (call or {}).get("function") or {} if isinstance(call, dict) else {}
            args = fn.get("arguments")
            args = _canonical_arguments(args) if isinstance(args, str) else json.dumps(args, sort_keys=True, default=str)
            norm.append((str(fn.get("name")), args))
        return (role, "", tuple(norm))
    return (role, _content_text(message.get("content")), ())


@dataclass
class TurnNode:
    """One generation call as a node of the prefix graph.

    ``prompt_ids``/``sampled_ids`` are the server's ids (empty when the call has none);
    ``sampled_logprobs`` is None when the server sent no logprobs.
    """

    node_id: int
    index: int
    call_id: str
    endpoint: str
    prompt_ids: list[int]
    sampled_ids: list[int]
    sampled_logprobs: list[float] | None
    has_ids: bool
    n_tools: int
    finish_reason: str | None
    requested_sampling_params: dict[str, Any]
    effective_sampling_params: dict[str, Any]
    harness_session_id: str | None
    request_messages: list[Any]
    request_tools: list[Any]
    response_message: dict[str, Any] | None
    usage: dict[str, Any] | None
    capture_level: str
    notes: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None
    parent: int | None = None
    children: list[int] = field(default_factory=list)
    started_at: float | None = None
    ended_at: float | None = None
    harness_parent_session_id: str | None = None  # the harness session a subagent's was spawned from

    def saw_end_of(self, earlier: "TurnNode") -> bool:
        """Whether this call's request arrived after `earlier`'s answer was complete.

        A call sent while another was still in flight (a harness overlapping calls) cannot contain
        that call's answer, so it is never its continuation. Records without times count as seen.
        """
        if earlier.ended_at is None or self.started_at is None:
            return True
        return earlier.ended_at <= self.started_at

    @property
    def tool_call_names(self) -> list[str]:
        """Names of the tool calls in the response message, in order."""
        calls = (self.response_message or {}).get("tool_calls") or []
        return [str(((c or {}).get("function") or {}).get("name")) for c in calls]


@dataclass
class HarnessSession:
    """One harness-native session among a rollout's calls (`RolloutGraph.harness_sessions`).

    Args:
        session_id: the id the harness sent.
        parent: the session it was spawned from, as the harness named it (None: a top-level session).
        parent_seen: the parent is a session of this rollout (and no loop): the session sits under it.
        depth: 0 for a top-level session, 1 for its subagents, ...
        calls: the arrival indices of its calls.
    """

    session_id: str
    parent: str | None
    parent_seen: bool
    depth: int
    calls: list[int]

    def as_dict(self) -> dict[str, Any]:
        """The session as a rollout document's ``harness_sessions`` entry."""
        return {"session_id": self.session_id, "parent": self.parent, "parent_seen": self.parent_seen,
                "depth": self.depth, "calls": list(self.calls)}


def harness_session_tree(calls_seen: Iterable[tuple[int, str | None, str | None]]) -> list[HarnessSession]:
    """The harness sessions of some calls, each placed under its parent (see `RolloutGraph.harness_sessions`).

    Args:
        calls_seen: ``(arrival index, harness session id, parent session id)`` per call, in arrival order
            (the graph's nodes, or a dataset's trace rows).

    Returns:
        One `HarnessSession` per distinct harness session id, in order of first call.
    """
    calls: dict[str, list[int]] = {}
    parents: dict[str, str | None] = {}
    for index, sid, parent in calls_seen:
        if not sid:
            continue
        calls.setdefault(sid, []).append(index)
        if parents.get(sid) is None:
            parents[sid] = parent or None
    sessions = []
    for sid, indices in calls.items():
        depth, seen, current = 0, {sid}, parents[sid]
        while current is not None and current in calls and current not in seen:
            seen.add(current)
            depth += 1
            current = parents[current]
        parent = parents[sid]
        looped = current is not None and current in seen
        parent_seen = parent is not None and parent in calls and not looped
        sessions.append(HarnessSession(sid, parent, parent_seen, depth if parent_seen else 0, indices))
    return sessions


def _node_from_record(node_id: int, record: dict[str, Any]) -> TurnNode:
    prompt = record.get("prompt_token_ids")
    sampled = record.get("completion_token_ids")
    messages, tools = call_request_chat(record)  # one record -> chat mapping for every API (wire.records)
    return TurnNode(
        node_id=node_id,
        index=int(record.get("index", node_id)),
        call_id=str(record.get("call_id", "")),
        endpoint=str(record.get("endpoint", "")),
        prompt_ids=prompt if isinstance(prompt, list) else list(prompt or []),
        sampled_ids=sampled if isinstance(sampled, list) else list(sampled or []),
        sampled_logprobs=None if record.get("per_token_logps") is None else list(record["per_token_logps"]),
        has_ids=prompt is not None and sampled is not None,
        n_tools=len(tools) if isinstance(tools, list) else 0,
        finish_reason=record.get("finish_reason"),
        requested_sampling_params=dict(record.get("requested_sampling_params") or {}),
        effective_sampling_params=dict(record.get("effective_sampling_params") or {}),
        harness_session_id=record.get("harness_session_id"),
        request_messages=list(messages or []),
        request_tools=list(tools) if isinstance(tools, list) else [],
        response_message=call_answer_chat(record),
        usage=record.get("usage") if isinstance(record.get("usage"), dict) else None,
        capture_level=str(record.get("capture_level", "none")),
        notes=[str(n) for n in record.get("notes") or []],
        error=record.get("error") if isinstance(record.get("error"), dict) else None,
        started_at=_seconds(record.get("started_at")),
        ended_at=_seconds(record.get("ended_at")),
        harness_parent_session_id=_text_or_none(record.get("harness_parent_session_id")),
    )


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _seconds(value: Any) -> float | None:
    """A record's epoch-seconds time, or None when absent or not a number."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _pack(ids: list[int]) -> bytes:
    try:
        return array("q", ids).tobytes()
    except (OverflowError, TypeError) as exc:
        raise ValueError(f"token ids must be integers in int64 range (prompt_token_ids/completion_token_ids): {exc}") from exc


def _check_ids(ids: list[int]) -> None:
    """Raise ``_pack``'s ValueError for ids it would reject, without packing them when they are fine.

    A list of Python ints whose sum lies in ``[0, 2**63)`` passes at C speed (exact for non-negative
    ids, as token ids are); anything else (a float, a string, a negative sum) gets the exact check.
    """
    try:
        total = sum(ids)
    except TypeError:
        total = None
    if type(total) is not int or not 0 <= total < 2**63:
        _pack(ids)


_GUESSES = 4  # recent childless calls tried as a known prefix before hashing a whole prompt


class _PrefixIndex:
    """Full sequences of earlier nodes, keyed by (length, digest), for longest-prefix lookups."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[int, bytes], list[int]] = {}
        self._lengths: list[int] = []  # sorted distinct lengths
        self._length_set: set[int] = set()

    def add(self, length: int, digest: bytes, node_id: int) -> None:
        """Index a node's full token sequence (prompt + sampled) by its length and prefix digest."""
        bisect.insort(self._by_key.setdefault((length, digest), []), node_id)  # ascending, even when indexed late
        if length not in self._length_set:
            self._length_set.add(length)
            bisect.insort(self._lengths, length)

    def reaches(self, length: int) -> bool:
        """Whether some indexed sequence is at most ``length`` long (so could be a prefix)."""
        return bool(self._lengths) and self._lengths[0] <= length

    def longest(self, seq: list[int], is_prefix: Callable[[int, int], bool], start: tuple[int, Any, int | None] | None = None) -> tuple[int | None, Any]:
        """The node whose full sequence is the longest prefix of ``seq`` (latest on ties).

        Args:
            seq: the prompt.
            is_prefix: ``is_prefix(node, length)`` confirms a digest hit exactly.
            start: ``(length, hasher, node)`` when ``seq[:length]`` is already known to be ``node``'s
                full sequence and ``hasher`` holds its digest state; only the rest of ``seq`` is hashed.

        Returns:
            ``(node or None, hasher fed with all of seq)``.
        """
        pos, h, best = start if start is not None else (0, hashlib.blake2b(digest_size=16), None)
        h = h.copy()
        if best is not None:  # latest on ties: a later call may have the same full sequence
            latest = max(self._by_key.get((pos, h.digest()), [best]))
            if latest != best and is_prefix(latest, pos):
                best = latest
        base = pos
        packed = _pack(seq[base:])  # one conversion; slices of bytes below are cheap
        hits: list[tuple[int, list[int]]] = []
        for k in range(bisect.bisect_right(self._lengths, pos), len(self._lengths)):
            length = self._lengths[k]
            if length > len(seq):
                break
            h.update(packed[(pos - base) * 8:(length - base) * 8])
            pos = length
            found = self._by_key.get((length, h.copy().digest()))
            if found:
                hits.append((length, found))
        h.update(packed[(pos - base) * 8:])
        for length, found in reversed(hits):
            for node_id in reversed(found):
                if is_prefix(node_id, length):
                    return node_id, h
        return best, h


def _digest(packed: bytes) -> bytes:
    return hashlib.blake2b(packed, digest_size=16).digest()


class RolloutGraph:
    """The prefix graph of one rollout's generation calls.

    Args:
        nodes: the nodes in arrival order, with parents and children already linked.
        mode: ``"tokens"`` when parents were found on token ids, ``"messages"`` for the fallback.
        prompt_keys: one hashable key per node, equal for equal prompts (computed when missing).
    """

    def __init__(self, nodes: list[TurnNode], mode: str, prompt_keys: list[Any] | None = None) -> None:
        self._nodes = nodes
        self._prompt_keys = prompt_keys
        self._by_id = {n.node_id: n for n in nodes}
        self.mode = mode
        self._discarded = self._find_discarded()

    def nodes(self) -> list[TurnNode]:
        """All nodes in arrival order."""
        return list(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def get(self, node_id: int) -> TurnNode:
        """The node with this id.

        Raises:
            KeyError: no such node.
        """
        return self._by_id[node_id]

    def roots(self) -> list[TurnNode]:
        """Nodes without a parent, in arrival order."""
        return [n for n in self._nodes if n.parent is None]

    def leaves(self) -> list[TurnNode]:
        """Nodes without children, in arrival order."""
        return [n for n in self._nodes if not n.children]

    def forks(self) -> list[TurnNode]:
        """Nodes with two or more children."""
        return [n for n in self._nodes if len(n.children) >= 2]

    def root_of(self, node_id: int) -> int:
        """The id of the root above a node."""
        node = self._by_id[node_id]
        while node.parent is not None:
            node = self._by_id[node.parent]
        return node.node_id

    def path_to(self, node_id: int) -> list[int]:
        """Node ids from the root down to ``node_id``."""
        path = [node_id]
        node = self._by_id[node_id]
        while node.parent is not None:
            path.append(node.parent)
            node = self._by_id[node.parent]
        path.reverse()
        return path

    def paths(self) -> list[list[int]]:
        """One root-to-leaf path (node ids) per leaf, in the leaves' arrival order."""
        return [self.path_to(leaf.node_id) for leaf in self.leaves()]

    def is_discarded(self, node_id: int) -> bool:
        """Whether a node is a discarded retry/resample."""
        return node_id in self._discarded

    def discarded_nodes(self) -> list[TurnNode]:
        """Discarded nodes in arrival order."""
        return [n for n in self._nodes if n.node_id in self._discarded]

    def _find_discarded(self) -> set[int]:
        groups: dict[Any, list[TurnNode]] = {}
        for node in self._nodes:
            if node.parent is not None:
                groups.setdefault(("parent", node.parent), []).append(node)
        by_prompt: dict[Any, list[TurnNode]] = {}
        for pos, node in enumerate(self._nodes):
            if self._prompt_keys is not None:
                key = self._prompt_keys[pos]
            elif self.mode == "tokens":
                key = (len(node.prompt_ids), _digest(_pack(node.prompt_ids)))
            else:
                key = tuple(normalise_message(m) for m in node.request_messages)
            by_prompt.setdefault(key, []).append(node)
        discarded: set[int] = set()
        for members in list(groups.values()) + list(by_prompt.values()):
            if len(members) < 2:
                continue
            if any(m.children for m in members):
                discarded.update(m.node_id for m in members if not m.children)
        return discarded

    def harness_sessions(self) -> list[HarnessSession]:
        """The harness's own sessions among the calls, subagent sessions under their parents.

        A call's harness session is the id its harness sent (`TurnNode.harness_session_id`); its
        parent, the session the harness named as the one that spawned it. Sessions come in order of
        their first call; a parent named but with no call here (or a loop of parents, which a harness
        can forge) makes a session a top-level one with `parent_seen` False.

        Returns:
            One `HarnessSession` per distinct harness session id (none when no call carried one).
        """
        return harness_session_tree((n.index, n.harness_session_id, n.harness_parent_session_id) for n in self._nodes)

    def stats(self) -> dict[str, int | str]:
        """Graph shape.

        Returns:
            ``{"n_turns", "n_roots", "n_forks", "n_discarded", "n_leaves", "max_depth", "mode"}``.
        """
        depth: dict[int, int] = {}
        for node in self._nodes:  # parents arrive before children
            depth[node.node_id] = 1 if node.parent is None else depth[node.parent] + 1
        return {
            "n_turns": len(self._nodes),
            "n_roots": len(self.roots()),
            "n_forks": len(self.forks()),
            "n_discarded": len(self._discarded),
            "n_leaves": len(self.leaves()),
            "max_depth": max(depth.values(), default=0),
            "mode": self.mode,
        }


class _LazyStates:
    """Hash states of the nodes' sequences, computed only when a lookup needs them.

    A prompt whose first token starts no earlier node's sequence cannot have a parent, so it is not
    hashed when it arrives (the every-call-a-new-root case then costs no hashing at all); its state
    is computed, once, when a later prompt with the same first token needs it.
    """

    def __init__(self, prompts: list[list[int]], sampled: list[list[int]]) -> None:
        self._prompts = prompts
        self._sampled = sampled
        self.states: list[Any] = [None] * len(prompts)  # hasher after the node's full sequence
        self.prompt_digests: list[bytes | None] = [None] * len(prompts)

    def set(self, i: int, prompt_hasher: Any) -> None:
        """Record node ``i``'s state from a hasher already fed with its whole prompt."""
        self.prompt_digests[i] = prompt_hasher.digest()
        prompt_hasher.update(_pack(self._sampled[i]))
        self.states[i] = prompt_hasher

    def state(self, i: int) -> Any:
        """The hasher state after node ``i``'s full sequence (prompt + sampled)."""
        if self.states[i] is None:
            self.set(i, hashlib.blake2b(_pack(self._prompts[i]), digest_size=16))
        return self.states[i]

    def prompt_keys(self) -> list[Any]:
        """One key per node, equal exactly for equal prompts (up to the digest).

        Prompts never hashed are hashed here only when another prompt has the same length, first
        and last token; any other gets a key of its own.
        """
        coarse: dict[tuple[Any, ...], int] = {}
        shapes = [(len(p), p[0], p[-1]) if p else (0, None, None) for p in self._prompts]
        for shape in shapes:
            coarse[shape] = coarse.get(shape, 0) + 1
        keys: list[Any] = []
        for i, prompt in enumerate(self._prompts):
            digest = self.prompt_digests[i]
            if digest is None and coarse[shapes[i]] > 1:
                digest = self.prompt_digests[i] = _digest(_pack(prompt))
            keys.append((len(prompt), digest) if digest is not None else ("unique", i))
        return keys


def _link_by_sequences(nodes: list[TurnNode], prompts: list[list[int]], sampled: list[list[int]]) -> list[Any]:
    """Link each node to its longest-prefix parent; return each prompt's key (see ``RolloutGraph``).

    The few most recent childless calls are tried first as a known prefix (an exact list comparison
    each, usually failing at the first token for another conversation): in an agent loop, even with
    several sessions interleaved, only the new tokens of each prompt are then hashed. A miss falls
    back to hashing the whole prompt, and only when some earlier sequence starts with its first
    token. Either way each prompt costs at most O(its length).
    """
    indexes: dict[int, _PrefixIndex] = {}  # by the first token of the indexed sequences
    pending: dict[int, list[int]] = {}  # nodes not hashed yet, by the first token of their sequence
    hashes = _LazyStates(prompts, sampled)
    frontier: list[int] = []  # nodes without children yet, oldest first
    for i, node in enumerate(nodes):
        prompt = prompts[i]

        def is_prefix(j: int, n: int, prompt: list[int] = prompt, node: TurnNode = node) -> bool:
            head, cut = prompts[j], len(prompts[j])
            if n > len(prompt) or n == 0 or not node.saw_end_of(nodes[j]):
                return False
            last = sampled[j][-1] if n > cut else head[-1]
            if prompt[n - 1] != last or (cut and prompt[0] != head[0]):  # cheap rejects before copying
                return False
            return prompt[:cut] == head and prompt[cut:n] == sampled[j]

        start = None
        if prompt:
            # Known-prefix shortcut: the most recent open conversations (latest leaves first).
            for j in reversed(frontier[-_GUESSES:]):
                full = len(prompts[j]) + len(sampled[j])
                if full and (start is None or full > start[0]) and is_prefix(j, full):
                    start = (full, j)
        parent = None
        try:
            known_first = bool(prompt) and (prompt[0] in indexes or prompt[0] in pending)
        except TypeError:  # an unhashable first token: the clear error hashing would give
            _pack(prompt)
            raise
        if known_first or start is not None:
            index = indexes.setdefault(prompt[0], _PrefixIndex())
            for j in pending.pop(prompt[0], []):
                index.add(len(prompts[j]) + len(sampled[j]), hashes.state(j).digest(), j)
            if start is not None or index.reaches(len(prompt)):
                known = None if start is None else (start[0], hashes.state(start[1]), start[1])
                parent, h = index.longest(prompt, is_prefix, known)
                hashes.set(i, h)
        if parent is not None:
            node.parent = nodes[parent].node_id
            nodes[parent].children.append(node.node_id)
            if parent in frontier:
                frontier.remove(parent)
        frontier.append(i)
        if prompt or sampled[i]:
            first = prompt[0] if prompt else sampled[i][0]
            if hashes.states[i] is not None:
                indexes.setdefault(first, _PrefixIndex()).add(len(prompt) + len(sampled[i]), hashes.states[i].digest(), i)
            else:  # not hashed (yet): still reject ids that hashing would have rejected
                _check_ids(prompt)
                _check_ids(sampled[i])
                pending.setdefault(first, []).append(i)
    return hashes.prompt_keys()


def build_graph(records: Iterable[dict[str, Any]]) -> RolloutGraph:
    """Build the prefix graph of one rollout.

    Only generation calls (chat/completions or completions endpoints with a response) become nodes;
    other calls are ignored here but stay in the trace. Node ids are the records' arrival indices.
    When every generation call carries server token ids, parents are found on tokens; otherwise the
    graph falls back to comparing normalised messages.

    Args:
        records: trace records (any order; they are sorted by ``index``).

    Returns:
        The graph.

    Raises:
        ValueError: two records share an arrival index.
    """
    recs = sorted((r for r in records if is_generation_record(r)), key=lambda r: int(r.get("index", 0)))
    nodes = []
    seen: set[int] = set()
    for r in recs:
        idx = int(r.get("index", 0))
        if idx in seen:
            raise ValueError(f"trace record index {idx} appears twice (field 'index' must be unique per session)")
        seen.add(idx)
        nodes.append(_node_from_record(idx, r))
    mode = "tokens" if nodes and all(n.has_ids for n in nodes) else "messages"
    if mode == "tokens":
        prompts = [n.prompt_ids for n in nodes]
        sampled = [n.sampled_ids for n in nodes]
    else:
        intern: dict[tuple[Any, ...], int] = {}

        def ids(messages: list[Any]) -> list[int]:
            return [intern.setdefault(normalise_message(m), len(intern)) for m in messages]

        prompts = [ids(n.request_messages) for n in nodes]
        sampled = [ids([n.response_message]) if n.response_message is not None else [] for n in nodes]
    graph = RolloutGraph(nodes, mode, prompt_keys=_link_by_sequences(nodes, prompts, sampled))
    log.debug("graph: %s", graph.stats())
    return graph


def iter_paths(graph: RolloutGraph) -> Iterator[list[TurnNode]]:
    """Yield each root-to-leaf path as nodes (helper for exporters)."""
    for path in graph.paths():
        yield [graph.get(i) for i in path]
