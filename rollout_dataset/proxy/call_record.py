"""The recording stage: a call's trace record, built once from its `Call` parts and written before its
last byte reaches the harness.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from rollout_dataset.errors import RecordWriteError
from rollout_dataset.proxy.call import Call
from rollout_dataset.proxy.on_policy import response_reply
from rollout_dataset.proxy.on_policy_upstream import OnPolicyMode
from rollout_dataset.proxy.recorder import TraceRecorder
from rollout_dataset.proxy.harness_sessions import harness_session
from rollout_dataset.proxy.tokens import token_fields
from rollout_dataset.wire.anthropic_chat import assemble_events

__all__ = ["CallRecorder"]

log = logging.getLogger(__name__)


class CallRecorder:
    """Writes each call's record once; reads the call's parts, changes none but `Delivery.recorded`.

    Args:
        recorder: the trace files.
        on_policy: on-policy mode, told how each of its calls ended (None when off).
    """

    def __init__(self, recorder: TraceRecorder, on_policy: OnPolicyMode | None) -> None:
        self.recorder = recorder
        self.on_policy = on_policy
        # several upstreams: on-policy mode of each (`proxy.upstream_pool`), by the call's upstream index
        self.lane_policies: list[OnPolicyMode | None] | None = None

    def finish(self, call: Call) -> RecordWriteError | None:
        """Write the call's record once (before its last byte reaches the harness).

        Args:
            call: the call, its parts as the stages left them.

        Returns:
            None when the record is durable (or was written before); the error when it could not be
            written, so the caller fails the call instead of answering it unrecorded.
        """
        if call.delivery.recorded:
            return None
        call.delivery.recorded = True
        ended = time.time()
        asked, answer, timing = call.asked, call.answer, call.timing
        latency = max(0.0, (time.perf_counter() - timing.t0) * 1000.0)
        ok = call.error is None or call.error["kind"] in ("client_disconnect", "upstream_disconnect",
                                                          "upstream_timeout")
        response = answer.body
        try:
            if asked.kind == "messages" and isinstance(response, str):  # a native Messages stream, as it came
                response = assemble_events(response) or response
            fields = token_fields(response if ok else None, asked.kind)
        except Exception as exc:  # noqa: BLE001 - an answer of unexpected shape: recorded as it came, without token fields
            fields = token_fields(None, asked.kind)
            what = "the stream could not be assembled" if isinstance(response, str) else "no token fields"
            fields["notes"] = [f"{what}: the answer has an unexpected shape ({type(exc).__name__}: {exc}); "
                               "recorded as it came"]
        native, parent = harness_session(call.headers)
        record: dict[str, Any] = {
            "schema_version": 1,
            "index": call.index,
            "call_id": call.call_id,
            "session": call.session,
            "harness_session_id": native,
            "started_at": timing.started_at,
            "ended_at": ended,
            "latency_ms": latency,
            "ttft_ms": timing.ttft_ms,
            "method": call.method,
            "endpoint": call.endpoint,
            "stream": asked.stream or answer.event_stream,
            "status": answer.status,
            "request_headers": call.headers,
            "request": asked.body,
            "upstream_changes": asked.upstream_changes,
            "response": answer.translated if answer.translated is not None else response,
            "prompt_token_ids": fields["prompt_token_ids"],
            "completion_token_ids": fields["completion_token_ids"],
            "per_token_logps": fields["per_token_logps"],
            "finish_reason": fields["finish_reason"],
            "usage": fields["usage"],
            "requested_sampling_params": asked.requested,
            "effective_sampling_params": asked.effective,
            "capture_level": fields["capture_level"],
            "token_source": fields["token_source"],
            "choices_token_ids": fields["choices_token_ids"],
            "notes": call.notes + fields["notes"],
            "error": call.error,
        }
        if asked.translator is not None:  # a Messages call: the chat exchange that replaced it
            record["upstream"] = {"endpoint": "/v1/chat/completions", "request": asked.upstream_request,
                                  "response": response}
        if parent is not None:  # a subagent's session: present only then
            record["harness_parent_session_id"] = parent
        served = call.served
        if call.record_server and served is not None:
            record["model_server"] = served.as_record()
        policy = self.on_policy
        if served is not None and self.lane_policies is not None:
            policy = self.lane_policies[served.index]
        if asked.on_policy is not None and policy is not None:
            # a harness that closes the connection once it has read the whole answer (Codex, after
            # `response.completed`) leaves a client_disconnect on a complete answer: still a parent
            whole = call.error is not None and call.error["kind"] == "client_disconnect" and \
                fields.get("finish_reason") not in (None, "in_progress", "failed")
            good = answer.status == 200 and (call.error is None or whole)
            record["notes"] += policy.finish(call.session, call.index, asked.on_policy, good, fields,
                                             response_reply(response))
            record["continuity"] = asked.on_policy.continuity.as_record()
        raw = {}
        if asked.raw_body is not None:
            raw["request"] = asked.raw_body
        if answer.raw_body is not None:
            raw["response"] = answer.raw_body
        try:
            self.recorder.write(call.session, record, raw, nonfinite=call.nonfinite)
        except RecordWriteError as exc:
            log.error("call %s (%s %s) failed: %s", call.call_id, call.method, call.endpoint, exc)
            return exc
        except Exception as exc:  # e.g. a value no encoder takes: never a success without a record
            log.exception("could not encode the trace record of call %s", call.call_id)
            return RecordWriteError(str(self.recorder.path(call.session)), OSError(0, f"{type(exc).__name__}: {exc}"))
        return None
