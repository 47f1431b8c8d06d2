"""On-policy mode's calls to the model server: ``/tokenize``, ``/detokenize`` and the probe.

`OnPolicyMode` is the proxy's only entry point: `prepare` (before a chat request goes upstream)
returns the body to send and the call's provisional continuity; `finish` (when its record is
written) checks that the server generated from the prompt the proxy meant and remembers the call as
a possible parent. The splicing itself is pure (`rollout_dataset.proxy.on_policy`).

The probe: before the first prompt the proxy builds itself, it asks the server once (a one-token
chat completion) whether it generates from ``kv_transfer_params.prompt_token_ids``; if the
returned ``prompt_token_ids`` differ from what was sent, the mode is off for that upstream (logged
once, and every later record says so). A probe that could not reach the server is retried later.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Mapping

import httpx

from rollout_dataset.errors import InflightLimitError
from rollout_dataset.proxy.jsoncodec import dumps_standard, loads
from rollout_dataset.proxy.on_policy_harmony import HarmonyBridge, harmony_bridge
from rollout_dataset.reasoning import only_reasoning_removed
from rollout_dataset.tokenizers import common_prefix
from rollout_dataset.wire.responses_chat import RESPONSES_ENDPOINT
from rollout_dataset.proxy.on_policy import (
    Continuity,
    PastCall,
    SessionMemory,
    SplicePlan,
    as_chat_endpoint_reads,
    blank_reply,
    content_mismatch_detail,
    drift_of,
    explain_content_change,
    message_key,
    past_call_from_record,
    plan_splice,
    reply_key,
    request_context,
    restore_reasoning,
    sends_prompt_ids,
    text_only,
)

__all__ = ["OnPolicyMode", "Prepared", "PROBE_MESSAGES", "context_overflow"]

log = logging.getLogger(__name__)

PROBE_MESSAGES = [{"role": "user", "content": "on-policy probe"}]
AUX_TIMEOUT_S = 60.0  # read timeout of /tokenize, /detokenize and the probe
PROBE_IDS = 32  # the probe sends this many ids of the first prompt it would send (not its probe message's)
_PASS_TO_TOKENIZE = ("model", "tools", "chat_template", "chat_template_kwargs", "continue_final_message",
                     "documents", "add_special_tokens", "reasoning_effort")
_AUX_DROP = frozenset({b"content-type", b"accept", b"content-length"})


#: what a repaired call's record says when its prompt differs from what the harness sent for a named cause.
_REPAIR_DETAIL = {
    "whitespace_drift": "the history's reply differs from the sampled one only in whitespace (e.g. a newline the "
                        "tool parser left in content, doubled by the template); the sampled ids were sent",
    "harness_dropped_reasoning": "the harness sent the reply back without its reasoning, which the template keeps "
                                 "here; the sampled reasoning was put back, so the prompt differs from what the "
                                 "harness sent",
    "reply_boundary_merged": "the reply's first characters merged with the end of the earlier prompt into other ids "
                             "in the history's render (a BPE merge across the reply boundary, e.g. the generation "
                             "prompt's newline and a reply's leading newlines); the sampled ids were sent",
    "harmony_rerendered": "Harmony re-renders the sampled tool call's header in history (commentary json for the "
                          "sampled commentary <|constrain|>json); the sampled ids were sent",
}


_HISTORY_REASONING_DETAIL = ("the chat template now leaves the reasoning of earlier turns out of the same history "
                             "(Qwen3 once a new user message comes); the turn starts a new sequence")
_RESPONSES_RENDER_DETAIL = ("the server's /tokenize renders the earlier Responses call's input, read as chat "
                            "messages, to other ids than its Responses endpoint used (a tool or item type read "
                            "another way); the request is sent as the harness sent it")
_BOUNDARY_DETAIL = ("the server renders the earlier conversation differently now: its last ids merged with the "
                    "reply in the history, and their text is not where the earlier prompt's was")


class _AuxError(Exception):
    """A /tokenize, /detokenize or probe call that failed (the message names URL and status)."""


@dataclass
class Prepared:
    """What `OnPolicyMode.prepare` decided for one chat request.

    Attributes:
        body: the upstream body (the original, or with ``kv_transfer_params`` added).
        continuity: the call's continuity so far.
        target: the prompt ids sent, or None when the request was forwarded unchanged.
        message_keys: `message_key` of each request message (for the memory).
        context: the request's `request_context`.
        messages: the request's messages.
        harness_ids: the harness sent prompt ids itself (`kv_transfer_params.prompt_token_ids`).
        endpoint: the call's endpoint (a `/v1/responses` call is prepared as `responses_as_chat`).
        inflight: its token in the memory's `InflightCalls` until it finishes.
    """

    body: bytes
    continuity: Continuity
    target: list[int] | None = None
    message_keys: list[str] = field(default_factory=list)
    context: str = ""
    messages: list[Any] = field(default_factory=list)
    harness_ids: bool = False
    endpoint: str = "/v1/chat/completions"
    inflight: int | None = None


def context_overflow(n_target: int, n_render: int, max_model_len: int | None, body: dict[str, Any]) -> str | None:
    """Why the on-policy prompt would be refused where the server's own render would not, if so.

    Args:
        n_target: length of the on-policy prompt.
        n_render: length of the server's render.
        max_model_len: the server's context length (None: unknown).
        body: the chat request (its ``max_completion_tokens``/``max_tokens``).

    Returns:
        A sentence, or None when the on-policy prompt fits as well as the render does.
    """
    if max_model_len is None or n_target <= n_render:
        return None
    want = body.get("max_completion_tokens") or body.get("max_tokens") or 0
    want = want if isinstance(want, int) and not isinstance(want, bool) else 0
    if n_target + max(want, 1) > max_model_len >= n_render + max(want, 1):
        return (f"the on-policy prompt ({n_target} ids) plus {max(want, 1)} output tokens exceeds the server's "
                f"max_model_len {max_model_len}, which its own render ({n_render} ids) fits")
    return None


def _with_prompt_ids(body: bytes, ids: list[int]) -> bytes:
    """The JSON body with ``kv_transfer_params`` appended (the caller checked the key is absent)."""
    stripped = body.rstrip()
    head = stripped[:-1].rstrip()
    sep = b"" if head.endswith(b"{") else b","
    extra = json.dumps({"prompt_token_ids": ids}, separators=(",", ":")).encode()
    return head + sep + b'"kv_transfer_params":' + extra + b"}"


class OnPolicyMode:
    """The proxy's on-policy mode for one upstream.

    Args:
        upstream_root: the model server's root URL (``/tokenize`` lives there).
        transport: the proxy's httpx transport.
        extensions: httpx request extensions (timeouts).
        memory: finished calls per session (a fresh one by default).
        others: the records others wrote to a session's file since the last look
            (`TraceRecorder.records_by_others`: other workers with ``proxy --workers N``, this proxy
            before a restart): read before each parent lookup, so a session's calls find their parent
            whichever process answered it.
        read_body: reads an answer's whole body (the proxy's counts it against the in-flight bound,
            `rollout_dataset.proxy.inflight.read_passing`).
    """

    def __init__(self, upstream_root: str, transport: httpx.AsyncBaseTransport, extensions: dict[str, Any],
                 memory: SessionMemory | None = None,
                 others: Callable[[str], Iterable[dict[str, Any]]] | None = None,
                 read_body: Callable[[httpx.Response], Awaitable[bytes]] = httpx.Response.aread) -> None:
        self.upstream_root = upstream_root.rstrip("/")
        self.transport = transport
        self.read_body = read_body
        timeout = dict(extensions.get("timeout") or {})
        for key in ("read", "write"):  # a stuck /tokenize must not hold the harness's call for long
            timeout[key] = min(timeout.get(key) or AUX_TIMEOUT_S, AUX_TIMEOUT_S)
        self.extensions = {**extensions, "timeout": timeout}
        self.memory = memory or SessionMemory()
        self.others = others
        self.honoured: bool | None = None  # None: not probed yet
        self.off_reason: str | None = None
        self.harmony_models: dict[Any, str] = {}  # per model name: what `harmony_bridge` learnt of the server
        self._probe_lock = asyncio.Lock()

    # ---- server calls -------------------------------------------------------------------------

    async def _post(self, path: str, payload: dict[str, Any], headers: list[tuple[bytes, bytes]]) -> Any:
        url = self.upstream_root + path
        hdrs = [(k, v) for k, v in headers if k not in _AUX_DROP]
        hdrs += [(b"content-type", b"application/json"), (b"accept", b"application/json")]
        request = httpx.Request("POST", url, content=dumps_standard(payload),
                                headers=hdrs, extensions=self.extensions)
        try:
            response = await self.transport.handle_async_request(request)
            try:
                data = await self.read_body(response)
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            raise _AuxError(f"{url}: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise _AuxError(f"{url} answered HTTP {response.status_code}: {data[:300].decode('utf-8', 'replace')}")
        try:
            return loads(data)[0]
        except ValueError as exc:
            raise _AuxError(f"{url} answered with a body that is not JSON") from exc

    async def tokenize(self, body: dict[str, Any], messages: list[Any],
                       headers: list[tuple[bytes, bytes]]) -> tuple[list[int], int | None]:
        """The server's render of `messages` as its chat endpoint would render `body`.

        Args:
            body: the chat request (its tools and template options are passed on).
            messages: the messages to render (generation prompt added).
            headers: headers for the server (the harness's credentials).

        Returns:
            The prompt ids, and the server's ``max_model_len`` (None when it gives none).

        Raises:
            _AuxError: the call failed or the answer has no ``tokens`` list.
        """
        payload = {k: body[k] for k in _PASS_TO_TOKENIZE if k in body and body[k] is not None}
        payload["messages"] = as_chat_endpoint_reads(messages)
        payload["add_generation_prompt"] = body.get("add_generation_prompt", True)
        out = await self._post("/tokenize", payload, headers)
        tokens = out.get("tokens") if isinstance(out, dict) else None
        if not isinstance(tokens, list):
            raise _AuxError(f"{self.upstream_root}/tokenize answered without a 'tokens' list")
        limit = out.get("max_model_len")
        return tokens, limit if isinstance(limit, int) and not isinstance(limit, bool) else None

    async def detokenize(self, model: Any, ids: list[int], headers: list[tuple[bytes, bytes]]) -> str:
        """Args: model: the model name. ids: token ids. headers: server headers. Returns: their text."""
        payload: dict[str, Any] = {"tokens": ids}
        if model is not None:
            payload["model"] = model
        out = await self._post("/detokenize", payload, headers)
        if not isinstance(out, dict) or not isinstance(out.get("prompt"), str):
            raise _AuxError(f"{self.upstream_root}/detokenize answered without a 'prompt' string")
        return out["prompt"]

    async def probe(self, model: Any, ids: list[int], headers: list[tuple[bytes, bytes]]) -> bool:
        """Whether the server generates from given prompt ids (asked once per upstream).

        Args:
            model: the model name of the request that needs it.
            ids: prompt ids that are not the render of the probe's own message.
            headers: server headers.

        Returns:
            True when the server honours ``kv_transfer_params.prompt_token_ids``.

        Raises:
            _AuxError: the probe could not be made (it will be tried again).
        """
        async with self._probe_lock:
            if self.honoured is not None:
                return self.honoured
            payload: dict[str, Any] = {"messages": PROBE_MESSAGES, "max_tokens": 1, "return_token_ids": True,
                                       "kv_transfer_params": {"prompt_token_ids": ids}}
            if model is not None:
                payload["model"] = model
            try:
                out = await self._post("/v1/chat/completions", payload, headers)
            except _AuxError as exc:
                if "HTTP 4" not in str(exc):
                    raise
                out = {}
            got = out.get("prompt_token_ids") if isinstance(out, dict) else None
            self.honoured = got == ids
            if not self.honoured:
                self.off_reason = (f"the model server at {self.upstream_root} does not generate from "
                                   "kv_transfer_params.prompt_token_ids (probe: the returned prompt ids differ): "
                                   "on-policy mode is off for this upstream")
                log.warning("%s", self.off_reason)
            return self.honoured

    # ---- the proxy's hooks --------------------------------------------------------------------

    async def prepare(self, session: str, parsed: dict[str, Any], body: bytes,
                      headers: list[tuple[bytes, bytes]], endpoint: str = "/v1/chat/completions") -> Prepared:
        """Decide the upstream body of a chat request (or of a Responses request, given as the chat
        request vLLM renders for it: `rollout_dataset.proxy.on_policy.responses_as_chat`).

        Args:
            session: the proxy session.
            parsed: the harness's request as a chat request (not modified).
            body: the upstream body so far (the prompt ids are added to it as they are to a chat body).
            headers: headers for the server.
            endpoint: the call's endpoint.

        Returns:
            The decision (failures become a ``not_repaired`` continuity).

        Raises:
            InflightLimitError: a server's answer would pass the proxy's in-flight limit.
        """
        t0 = time.perf_counter()
        messages = parsed.get("messages")
        if not isinstance(messages, list):
            messages = []
        prepared = Prepared(body, Continuity("not_repaired"), message_keys=[message_key(m) for m in messages],
                            context=request_context(parsed), messages=messages, harness_ids=sends_prompt_ids(parsed),
                            endpoint=endpoint)
        await self.memory.inflight.wait_for_parents(session, prepared.message_keys, messages)
        try:
            prepared.continuity = await self._decide(session, parsed, messages, prepared, headers)
        except _AuxError as exc:
            prepared.continuity = Continuity("not_repaired", reason="server_call_failed", detail=str(exc))
        except InflightLimitError:
            raise  # the proxy's memory bound refused an answer: the call is refused (503), not the mode
        except Exception as exc:  # never fail the harness's call over the mode
            log.exception("on-policy mode failed on a request of session %s", session)
            prepared.continuity = Continuity("not_repaired", reason="proxy_error", detail=f"{type(exc).__name__}: {exc}")
        prepared.continuity.tokenize_ms = round((time.perf_counter() - t0) * 1000.0, 3)
        prepared.inflight = self.memory.inflight.begin(session, prepared.message_keys)
        return prepared

    async def _decide(self, session: str, parsed: dict[str, Any], messages: list[Any], prepared: Prepared,
                      headers: list[tuple[bytes, bytes]]) -> Continuity:
        if self.others is not None:
            for record in self.others(session):
                past = past_call_from_record(record)
                if past is not None:
                    self.memory.remember(session, past)
        lookup = self.memory.find_parent(session, messages, prepared.context)
        parent = lookup.parent
        if parent is None:
            status = "exact" if lookup.reason in ("new_conversation", "reply_pasted") else "not_repaired"
            return Continuity(status, reason=lookup.reason, detail=lookup.detail)
        idx = parent.index
        if self.honoured is False:
            return Continuity("not_repaired", idx, "server_ignores_prompt_ids", self.off_reason)
        if "kv_transfer_params" in parsed:
            return Continuity("not_repaired", idx, "harness_set_kv_transfer_params",
                              "the harness sent kv_transfer_params itself; the request is forwarded as it came")
        if parsed.get("echo") or not text_only([m for m in messages if isinstance(m, dict)]):
            return Continuity("not_repaired", idx, "server_would_ignore",
                              "echo or non-text content: the server ignores given prompt ids then")
        bridged = await harmony_bridge(self.tokenize, self.detokenize, self.harmony_models, parsed, messages, parent,
                                       headers)
        if isinstance(bridged, Continuity):
            return bridged
        if isinstance(bridged, HarmonyBridge):
            return await self._send(parsed, prepared, idx, bridged.target, bridged.render, bridged.max_model_len,
                                    bridged.reason, headers)
        k = len(parent.message_keys)
        blank = list(messages[:k]) + [blank_reply(messages[k])] + list(messages[k + 1:])
        (parent_render, _), (render, max_model_len), (blank_render, _) = await asyncio.gather(
            self.tokenize(parsed, parent.messages, headers), self.tokenize(parsed, messages, headers),
            self.tokenize(parsed, blank, headers))
        if render == blank_render:  # the reply came back empty (e.g. all reasoning): locate it by a placeholder
            placeholder = list(messages[:k]) + [{**blank_reply(messages[k]), "content": "."}] + list(messages[k + 1:])
            blank_render, _ = await self.tokenize(parsed, placeholder, headers)
        if (RESPONSES_ENDPOINT in (parent.endpoint, prepared.endpoint) and parent.server_rendered
                and list(parent.prompt_ids) != list(parent_render)):
            return Continuity("not_repaired", idx, "tokenize_differs", _RESPONSES_RENDER_DETAIL)
        plan = plan_splice(parent, parent_render, render, blank_render)
        if plan.target is None:
            if plan.reason == "history_rerendered" and await self._history_lost_reasoning(
                    parsed.get("model"), parent_render, render, headers):
                return Continuity("reasoning_dropped", idx, "template_dropped_reasoning", _HISTORY_REASONING_DETAIL)
            return Continuity("not_repaired", idx, plan.reason, plan.detail)
        repair_reason: str | None = None
        causes: list[str] = []  # every cause met in this turn, the deciding one last
        if plan.needs_text_check:
            texts = await self._reply_texts(parsed.get("model"), plan, headers)
            if texts is None:
                return Continuity("not_repaired", idx, "history_rerendered", _BOUNDARY_DETAIL)
            sampled, rendered = texts
            if plan.boundary:
                causes.append("reply_boundary_merged")
            if sampled != rendered:
                cause = explain_content_change(sampled, rendered)
                if cause == "reply_all_reasoning":
                    return Continuity("reasoning_dropped", idx, "reply_all_reasoning",
                                      "the reply was all reasoning (no </think> sampled), so the harness's content "
                                      "is empty and the history holds none of it; the turn starts a new sequence",
                                      causes=causes + [cause])
                if cause == "reasoning_dropped":
                    restored = await self._restored_plan(parsed, messages, k, sampled, parent, parent_render,
                                                         blank_render, headers)
                    if restored is None:  # the template drops it even when sent back: by design
                        return Continuity("reasoning_dropped", idx, "template_dropped_reasoning",
                                          "the chat template leaves earlier reasoning out of this prompt by "
                                          "design; the turn starts a new sequence",
                                          causes=causes + ["template_dropped_reasoning"])
                    # the server renders the harness's messages without the reasoning: the restored
                    # splice is sent, and the drift is measured against that render
                    (plan, drift_cause), cause = restored, "harness_dropped_reasoning"
                    causes += [c for c in (drift_cause,) if c is not None]
                elif cause != "whitespace_drift":
                    return Continuity("not_repaired", idx, cause, content_mismatch_detail(sampled, rendered),
                                      causes=causes + [cause])
                repair_reason = cause
                causes.append(cause)
            elif plan.boundary:
                repair_reason = "reply_boundary_merged"
        target = plan.target
        assert target is not None  # plan_splice gave one above, and `_restored_plan` returns none without
        sent = await self._send(parsed, prepared, idx, target, render, max_model_len, repair_reason, headers)
        if sent.status == "repaired" and len(causes) > 1:
            sent.causes = sorted(set(causes), key=causes.index)
        return sent

    async def _history_lost_reasoning(self, model: Any, parent_render: list[int], render: list[int],
                                      headers: list[tuple[bytes, bytes]]) -> bool:
        """Whether the server renders the parent's messages again with only earlier think blocks left out."""
        pos = common_prefix(parent_render, render)
        earlier, later = await asyncio.gather(self.detokenize(model, list(parent_render[pos:]), headers),
                                              self.detokenize(model, list(render[pos:]), headers))
        return only_reasoning_removed(earlier, later)

    async def _reply_texts(self, model: Any, plan: SplicePlan,
                           headers: list[tuple[bytes, bytes]]) -> tuple[str, str] | None:
        """The sampled reply's text and the reply's text in the history's render.

        Returns:
            ``(sampled, rendered)``, the boundary's text taken off the start of ``rendered``; None when
            the render does not start with the text of the earlier prompt's merged ids (then the
            earlier prompt itself was rendered differently).
        """
        jobs = [self.detokenize(model, plan.sampled_content, headers),
                self.detokenize(model, plan.rendered_content, headers)]
        if plan.boundary:
            jobs.append(self.detokenize(model, plan.boundary, headers))
        sampled, rendered, *boundary = await asyncio.gather(*jobs)
        if boundary:
            if not rendered.startswith(boundary[0]):
                return None
            rendered = rendered[len(boundary[0]):]
        return sampled, rendered

    async def _send(self, parsed: dict[str, Any], prepared: Prepared, idx: int, target: list[int], render: list[int],
                    max_model_len: int | None, repair_reason: str | None,
                    headers: list[tuple[bytes, bytes]]) -> Continuity:
        """Send `target` as the prompt ids (after the context and probe checks), or say why not."""
        if target == render:
            return Continuity("exact", idx)
        overflow = context_overflow(len(target), len(render), max_model_len, parsed)
        if overflow:
            return Continuity("not_repaired", idx, "context_overflow", overflow)
        if self.honoured is None and not await self.probe(parsed.get("model"), target[:PROBE_IDS], headers):
            return Continuity("not_repaired", idx, "server_ignores_prompt_ids", self.off_reason)
        prepared.target = target
        prepared.body = _with_prompt_ids(prepared.body, target)
        return Continuity("repaired", idx, repair_reason,
                          _REPAIR_DETAIL.get(repair_reason) if repair_reason is not None else None,
                          drift=drift_of(render, target))

    async def _restored_plan(self, parsed: dict[str, Any], messages: list[Any], k: int, sampled: str,
                             parent: PastCall, parent_render: list[int], blank_render: list[int],
                             headers: list[tuple[bytes, bytes]]) -> tuple[SplicePlan, str | None] | None:
        """The splice for the history with the sampled reasoning put back, when the template keeps it there.

        Returns:
            The plan and ``whitespace_drift`` when the restored reply differs from the sampled one in
            whitespace only (else None), or None when the template drops the reasoning even when the harness sends it
            back (or the restored render does not hold the sampled reply).
        """
        restored = list(messages[:k]) + [restore_reasoning(messages[k], sampled)] + list(messages[k + 1:])
        render, _ = await self.tokenize(parsed, restored, headers)
        plan = plan_splice(parent, parent_render, render, blank_render)
        if plan.target is None:
            return None
        cause: str | None = None
        if plan.needs_text_check:
            texts = await self._reply_texts(parsed.get("model"), plan, headers)
            if texts is None:
                return None
            again, rendered = texts
            if again != rendered:
                if explain_content_change(again, rendered) != "whitespace_drift":
                    return None
                cause = "whitespace_drift"
        return plan, cause

    def finish(self, session: str, index: int, prepared: Prepared, ok: bool, fields: dict[str, Any],
               reply: Mapping[str, Any] | None = None) -> list[str]:
        """Check the server used the meant prompt, and remember the call as a possible parent.

        Args:
            session: the proxy session.
            index: the call's arrival index.
            prepared: what `prepare` decided.
            ok: the call succeeded (HTTP 200, no error).
            fields: the record's token fields (`rollout_dataset.proxy.tokens.token_fields`).
            reply: the chat answer's message (`on_policy.response_reply`), None when unknown.

        Returns:
            Notes for the record.
        """
        notes: list[str] = []
        prompt_ids, completion_ids = fields.get("prompt_token_ids"), fields.get("completion_token_ids")
        if prepared.target is not None and prompt_ids is not None and prompt_ids != prepared.target:
            if self.honoured is not False:
                self.off_reason = (f"the model server at {self.upstream_root} generated from other prompt ids than "
                                   "the kv_transfer_params.prompt_token_ids sent: on-policy mode is off for it")
                log.warning("%s", self.off_reason)
            self.honoured = False
            prepared.continuity = Continuity("not_repaired", prepared.continuity.parent_index,
                                             "server_ignores_prompt_ids", self.off_reason,
                                             tokenize_ms=prepared.continuity.tokenize_ms)
            notes.append("on-policy: the server's prompt ids differ from the ones sent")
        if ok and isinstance(prompt_ids, list) and isinstance(completion_ids, list):
            self.memory.remember(session, PastCall(index, prepared.message_keys, prepared.context,
                                                   prepared.messages, prompt_ids, completion_ids,
                                                   fields.get("finish_reason"),
                                                   server_rendered=prepared.target is None and not prepared.harness_ids,
                                                   endpoint=prepared.endpoint,
                                                   reply_key=reply_key(reply) if reply is not None else None))
        if prepared.inflight is not None:  # remembered (or failed): a request continuing it may go on
            self.memory.inflight.end(session, prepared.inflight)
            prepared.inflight = None
        return notes
