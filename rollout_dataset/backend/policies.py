"""What the local backend says: pluggable policies and their registry.

A policy receives a `PolicyRequest` (messages, tools, seed, sampling parameters, the turn index =
number of assistant messages so far) and returns a `PolicyOutput` (text and/or tool calls). The
backend turns that into token ids, logprobs, hermes tool-call markup and vLLM-shaped responses.

Built in: `echo` (repeats the last user message) and `script` (a JSON/YAML list of steps indexed by
turn). The registry is explicit: other modules add policies with `register_policy(name, factory)`,
and `make_policy(name)` finds only what was registered (no lookup by module name). The built-in
environments register their scripted players when their policy modules are imported (`oracle`:
`rollout_dataset.recipes.coding.policy`, `crafter`: `rollout_dataset.recipes.crafter.policy`); the edges
call `rollout_dataset.envs.registry.register_builtin_policies()`.

Script file format (JSON or YAML)::

    steps:                      # or the list alone at top level
      - "plain text answer"
      - text: "optional text before the calls"
        tool_calls:
          - {name: bash, arguments: {command: "ls -la"}}
      - {name: bash, arguments: {command: "cat a.py"}}   # shorthand for one call
      - token_ids: [72, 105, 33]  # exactly these ids (their decoded text is the answer, tool-call
                                  # markup included): forces a tokenization that is not canonical
    final: "Done."              # said on every turn after the steps run out (default "Done.")
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

__all__ = [
    "PolicyRequest",
    "PolicyOutput",
    "ToolCallSpec",
    "Policy",
    "register_policy",
    "make_policy",
    "available_policies",
    "EchoPolicy",
    "ScriptPolicy",
    "load_script",
    "message_text",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolCallSpec:
    """One tool call a policy wants to make.

    Args:
        name: the function name.
        arguments: a mapping (encoded as JSON) or an already-encoded JSON string.
    """

    name: str
    arguments: Any = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Returns: `{"name": ..., "arguments": ...}`."""
        return {"name": self.name, "arguments": self.arguments}


@dataclass
class PolicyOutput:
    """What the assistant says on one turn.

    Args:
        text: visible text (may be empty when there are tool calls).
        tool_calls: tool calls, emitted in hermes form after the text.
        token_ids: emit exactly these ids instead (their decoded text is the answer, tool-call
            markup included): a way to force a tokenization that is not the tokenizer's own.
        reasoning: a think block said before the text (`<think>\nREASONING\n</think>\n\n`, Qwen3's
            layout), for serving with a reasoning parser.
    """

    text: str = ""
    tool_calls: list[ToolCallSpec] = field(default_factory=list)
    token_ids: list[int] | None = None
    reasoning: str | None = None


@dataclass
class PolicyRequest:
    """The request a policy answers.

    Args:
        messages: the chat messages (for `/v1/completions`: one user message holding the prompt).
        tools: tool definitions from the request, or None.
        tool_choice: the request's tool_choice.
        seed: the request's seed, or None.
        sampling: sampling parameters (temperature, top_p, max_tokens, stop, n, ...).
        turn: number of assistant messages in `messages`.
        endpoint: "chat" or "completions".
        model: the requested model name.
        choice_index: which of the `n` choices is being produced.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    seed: int | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    turn: int = 0
    endpoint: str = "chat"
    model: str = "local"
    choice_index: int = 0

    @property
    def tool_names(self) -> list[str]:
        """Returns: the names of the functions the request offers."""
        names = []
        for t in self.tools or []:
            fn = t.get("function", t) if isinstance(t, Mapping) else {}
            if isinstance(fn, Mapping) and fn.get("name"):
                names.append(str(fn["name"]))
        return names


@runtime_checkable
class Policy(Protocol):
    """Anything with `respond(request) -> PolicyOutput`.

    The server calls `respond` in a worker thread unless the policy sets `run_in_thread = False`
    (for policies that answer in microseconds).
    """

    def respond(self, request: PolicyRequest) -> PolicyOutput:  # pragma: no cover - protocol
        """Decide what the assistant says for one request: text and/or tool calls."""
        ...


_REGISTRY: dict[str, Callable[..., Policy]] = {}
_LOCK = threading.Lock()


def register_policy(name: str, factory: Callable[..., Policy]) -> None:
    """Register a policy factory under `name` (replacing any earlier one).

    Args:
        name: the policy name used by `make_policy` and `rollout-dataset serve --policy`.
        factory: called with `make_policy`'s keyword arguments; returns a `Policy`.
    """
    with _LOCK:
        _REGISTRY[name] = factory


def unregister_policy(name: str) -> None:
    """Forget a policy factory (a no-op for a name never registered).

    Args:
        name: the name it was registered under.
    """
    with _LOCK:
        _REGISTRY.pop(name, None)


def available_policies() -> list[str]:
    """Returns: the names registered so far."""
    with _LOCK:
        return sorted(_REGISTRY)


def make_policy(name: str, **kwargs: Any) -> Policy:
    """Build a policy by name.

    Args:
        name: a registered name (see `register_policy`).
        **kwargs: passed to the factory (e.g. `script=PATH` or `steps=[...]` for `script`).

    Returns:
        The policy.

    Raises:
        ValueError: no policy of that name exists.
    """
    with _LOCK:
        factory = _REGISTRY.get(name)
    if factory is None:
        raise ValueError(f"unknown policy {name!r}; available: {', '.join(available_policies())}")
    return factory(**kwargs)


def message_text(content: Any) -> str:
    """The plain text of a message's content (a string or a list of content parts).

    Args:
        content: `message["content"]`.

    Returns:
        The concatenated text parts ("" for None).
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, Mapping) and p.get("type") == "text":
                parts.append(str(p.get("text", "")))
        return "".join(parts)
    return str(content)


class EchoPolicy:
    """Answers with the text of the last user message (or the completion prompt)."""

    run_in_thread = False  # cheap: the server calls it inline

    def respond(self, request: PolicyRequest) -> PolicyOutput:
        """Args: request: the request. Returns: the last user message's text."""
        for m in reversed(request.messages):
            if m.get("role") == "user":
                return PolicyOutput(text=message_text(m.get("content")))
        return PolicyOutput(text="")


def _parse_call(raw: Any, where: str) -> ToolCallSpec:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str) or not raw["name"]:
        raise ValueError(f"{where}: a tool call needs a non-empty string 'name'")
    args = raw.get("arguments", {})
    if isinstance(args, str):
        try:
            json.loads(args)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: 'arguments' is a string but not valid JSON: {exc}") from exc
    elif not isinstance(args, Mapping):
        raise ValueError(f"{where}: 'arguments' must be an object or a JSON string")
    else:
        args = dict(args)
    return ToolCallSpec(name=raw["name"], arguments=args)


def _parse_step(raw: Any, where: str) -> PolicyOutput:
    if isinstance(raw, str):
        return PolicyOutput(text=raw)
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: a step is a string or an object with 'text' and/or 'tool_calls'")
    if "name" in raw and "tool_calls" not in raw:
        return PolicyOutput(tool_calls=[_parse_call(raw, where)])
    if "token_ids" in raw:
        ids = raw["token_ids"]
        if set(raw) != {"token_ids"}:
            raise ValueError(f"{where}: 'token_ids' stands alone (no 'text' or 'tool_calls' beside it)")
        if (not isinstance(ids, list) or not ids
                or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids)):
            raise ValueError(f"{where}: 'token_ids' must be a non-empty list of non-negative integers")
        return PolicyOutput(token_ids=list(ids))
    unknown = set(raw) - {"text", "tool_calls", "tool_call", "reasoning"}
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)} (allowed: text, tool_calls, reasoning)")
    text = raw.get("text", "") or ""
    if not isinstance(text, str):
        raise ValueError(f"{where}: 'text' must be a string")
    reasoning = raw.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, str):
        raise ValueError(f"{where}: 'reasoning' must be a string")
    calls_raw = raw.get("tool_calls", [raw["tool_call"]] if "tool_call" in raw else [])
    if not isinstance(calls_raw, list):
        raise ValueError(f"{where}: 'tool_calls' must be a list")
    calls = [_parse_call(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(calls_raw)]
    if not text and not calls and reasoning is None:
        raise ValueError(f"{where}: a step needs 'text', 'tool_calls' or 'reasoning'")
    return PolicyOutput(text=text, tool_calls=calls, reasoning=reasoning)


def load_script(source: str | Path | Sequence[Any] | Mapping[str, Any]) -> tuple[list[PolicyOutput], str]:
    """Parse a script: a JSON/YAML file path, a list of steps, or `{"steps": [...], "final": ...}`.

    Args:
        source: the script or the path of its file.

    Returns:
        `(steps, final_text)`.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is not valid JSON/YAML or a step is malformed (message names the step).
    """
    where = "script"
    data: Any = source
    if isinstance(source, (str, Path)):
        path = Path(source)
        where = str(path)
        if not path.is_file():
            raise FileNotFoundError(f"script file not found: {path}")
        text = path.read_text(encoding="utf-8")
        try:
            if path.suffix.lower() == ".json":
                data = json.loads(text)
            else:
                import yaml

                data = yaml.safe_load(text)
        except Exception as exc:
            raise ValueError(f"{path}: not valid {'JSON' if path.suffix.lower() == '.json' else 'YAML'}: {exc}") from exc
    final = "Done."
    if isinstance(data, Mapping):
        unknown = set(data) - {"steps", "final"}
        if unknown:
            raise ValueError(f"{where}: unknown top-level keys {sorted(unknown)} (allowed: steps, final)")
        final = data.get("final", final)
        if not isinstance(final, str):
            raise ValueError(f"{where}: 'final' must be a string")
        data = data.get("steps", [])
    if not isinstance(data, list):
        raise ValueError(f"{where}: expected a list of steps (or an object with 'steps')")
    steps = [_parse_step(s, f"{where}: steps[{i}]") for i, s in enumerate(data)]
    return steps, final


class ScriptPolicy:
    """Says step `turn` of a script; after the last step, the final text.

    Args:
        script: a file path, a list of steps or `{"steps", "final"}` (see the module docstring).
        steps: the list of steps (alternative to `script`).
        final: the final text (overrides the script's).

    Raises:
        ValueError: neither `script` nor `steps` is given, or the script is malformed.
    """

    run_in_thread = False  # cheap: the server calls it inline

    def __init__(self, script: Any = None, steps: Sequence[Any] | None = None, final: str | None = None) -> None:
        if script is None and steps is None:
            raise ValueError("the script policy needs script=FILE (or steps=[...])")
        parsed, script_final = load_script(script if script is not None else list(steps or []))
        self.steps = parsed
        self.final = script_final if final is None else final

    def respond(self, request: PolicyRequest) -> PolicyOutput:
        """Args: request: the request. Returns: the step for `request.turn`, or the final text."""
        if 0 <= request.turn < len(self.steps):
            step = self.steps[request.turn]
            return PolicyOutput(text=step.text, tool_calls=list(step.tool_calls),
                                token_ids=list(step.token_ids) if step.token_ids is not None else None,
                                reasoning=step.reasoning)
        return PolicyOutput(text=self.final)


register_policy("echo", lambda **kw: EchoPolicy())
register_policy("script", lambda **kw: ScriptPolicy(**kw))
