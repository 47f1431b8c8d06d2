"""Harness-native sessions: the session ids harnesses already send, read from a call's recorded headers.

What each harness sends, checked against the real binaries (run through the proxy against the local
backend's script policy, every header printed; Codex's subagent headers only read in its binary: the
local backend cannot emit the namespaced ``multi_agent_v1`` tool call Codex needs to spawn one):

=====================  ==============================================  =============================================
harness                its session                                     a subagent's parent
=====================  ==============================================  =============================================
opencode 1.18.33       ``x-session-id`` (and ``x-session-affinity``,   ``x-parent-session-id`` (seen: a ``task`` tool
                       the same value), ``ses_...``                    call's subagent session)
Claude Code 2.1.328    ``x-claude-code-session-id`` (a UUID; also in   an ``Agent`` tool's agent sends
                       the body's ``metadata.user_id`` JSON); an       ``x-claude-code-parent-agent-id`` when an
                       agent: ``x-claude-code-agent-id``               agent spawned it, else none (its parent is
                                                                       the main thread: the session id); seen
                                                                       nested three deep
Codex 0.171.0          ``thread-id`` and ``session-id`` (equal for     ``x-codex-parent-thread-id`` (read in the
                       the root thread; ``x-codex-turn-metadata``      binary; ``x-openai-subagent`` names the kind)
                       repeats them)
OpenAI Agents SDK      nothing (``SQLiteSession`` stays client-side)   nothing (an agent used as a tool is a nested run)
0.24.0, LiteLLM
1.110.2,
mini-swe-agent 2.4.6
=====================  ==============================================  =============================================

A harness session only groups calls **within** the proxy session (the ``/sessions/<id>/`` prefix the
capture gives each rollout): it never chooses the trace file, so a harness that sends another
harness's (or another rollout's) session id only labels its own calls with it.
"""

from __future__ import annotations

__all__ = ["HARNESS_SESSION_HEADERS", "HARNESS_PARENT_HEADERS", "HARNESS_SESSION_RECORDED", "harness_session"]

#: headers whose value names the harness's own session, in order of preference (a Claude Code subagent's
#: agent id comes before the session id it shares with its parent; a Codex thread before its session).
HARNESS_SESSION_HEADERS: tuple[str, ...] = ("x-session-id", "x-claude-code-agent-id", "x-claude-code-session-id",
                                            "thread-id", "session_id", "session-id", "x-client-session-id")
#: headers whose value names the session a subagent was spawned from.
HARNESS_PARENT_HEADERS: tuple[str, ...] = ("x-parent-session-id", "x-claude-code-parent-agent-id",
                                           "x-codex-parent-thread-id")
#: every header of the tables above plus the harnesses' other session labels: recorded (allow-listed).
HARNESS_SESSION_RECORDED: frozenset[str] = frozenset(
    {*HARNESS_SESSION_HEADERS, *HARNESS_PARENT_HEADERS, "x-session-affinity", "x-claude-code-agent-type",
     "x-openai-subagent", "x-codex-window-id"})
_MAX_ID = 200  # characters of an id kept (a header may be long; an id is not)
#: the headers `harness_session` reads: a call without any of them (most calls) is answered at once.
_READ: frozenset[str] = frozenset({*HARNESS_SESSION_HEADERS, *HARNESS_PARENT_HEADERS})


def harness_session(headers: dict[str, str]) -> tuple[str | None, str | None]:
    """The harness's own session of a call and the session it was spawned from.

    Args:
        headers: recorded (allow-listed, lower-case) request headers.

    Returns:
        ``(session, parent)``: the first non-empty `HARNESS_SESSION_HEADERS` value and the first
        `HARNESS_PARENT_HEADERS` value, each cut to 200 characters; a Claude Code agent without a
        parent agent is a child of its session (``x-claude-code-session-id``). Either may be None.
    """
    if _READ.isdisjoint(headers):
        return None, None
    session = next((headers[name] for name in HARNESS_SESSION_HEADERS if headers.get(name)), None)
    parent = next((headers[name] for name in HARNESS_PARENT_HEADERS if headers.get(name)), None)
    if parent is None and headers.get("x-claude-code-agent-id"):
        parent = headers.get("x-claude-code-session-id") or None
    if session is not None and parent == session:
        parent = None
    return (session[:_MAX_ID] if session else None, parent[:_MAX_ID] if parent else None)
