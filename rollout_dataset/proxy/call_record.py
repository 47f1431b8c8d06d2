"""A call's trace record: built once from its `Call` state and written before its last byte reaches the
harness.
"""

from __future__ import annotations

import logging
import time

from rollout_dataset.errors import RecordWriteError
from rollout_dataset.proxy.call import Call
from rollout_dataset.proxy.on_policy_upstream import OnPolicyMode
from rollout_dataset.proxy.recorder import TraceRecorder
from rollout_dataset.proxy.redact import harness_session_id
from rollout_dataset.proxy.tokens import token_fields
from rollout_dataset.wire.anthropic_chat import assemble_events

__all__ = ["CallRecorder"]

log = logging.getLogger(__name__)


class CallRecorder:
    """Writing each call's record once (a mixin of `rollout_dataset.proxy.app.ProxyApp`)."""

    recorder: TraceRecorder
    on_policy: OnPolicyMode | None

    def _finish(self, call: Call) -> RecordWriteError | None:
        """Write the call's record once (before its last byte reaches the harness).

        Returns:
            None when the record is durable (or was written before); the error when it could not be
            written, so the caller fails the call instead of answering it unrecorded.
        """
        if call.recorded:
            return None
        call.recorded = True
        ended = time.time()
        latency = max(0.0, (time.perf_counter() - call.t0) * 1000.0)
        ok = call.error is None or call.error["kind"] in ("client_disconnect", "upstream_disconnect",
                                                          "upstream_timeout")
        if call.kind == "messages" and isinstance(call.response, str):  # a native Messages stream, as it came
            call.response = assemble_events(call.response) or call.response
        try:
            fields = token_fields(call.response if ok else None, call.kind)
        except Exception as exc:  # noqa: BLE001 - an answer of unexpected shape: recorded as it came, without token fields
            fields = token_fields(None, call.kind)
            fields["notes"] = [f"no token fields: the answer has an unexpected shape ({type(exc).__name__}: {exc})"]
        record = {
            "schema_version": 1,
            "index": call.index,
            "call_id": call.call_id,
            "session": call.session,
            "harness_session_id": harness_session_id(call.headers),
            "started_at": call.started_at,
            "ended_at": ended,
            "latency_ms": latency,
            "ttft_ms": call.ttft_ms,
            "method": call.method,
            "endpoint": call.endpoint,
            "stream": call.stream,
            "status": call.status,
            "request_headers": call.headers,
            "request": call.request,
            "upstream_changes": call.upstream_changes,
            "response": call.translated if call.translated is not None else call.response,
            "prompt_token_ids": fields["prompt_token_ids"],
            "completion_token_ids": fields["completion_token_ids"],
            "per_token_logps": fields["per_token_logps"],
            "finish_reason": fields["finish_reason"],
            "usage": fields["usage"],
            "requested_sampling_params": call.requested,
            "effective_sampling_params": call.effective,
            "capture_level": fields["capture_level"],
            "token_source": fields["token_source"],
            "choices_token_ids": fields["choices_token_ids"],
            "notes": call.notes + fields["notes"],
            "error": call.error,
        }
        if call.translator is not None:  # a Messages call: the chat exchange that replaced it
            record["upstream"] = {"endpoint": "/v1/chat/completions", "request": call.upstream_request,
                                  "response": call.response}
        if call.on_policy is not None and self.on_policy is not None:
            good = call.status == 200 and call.error is None
            record["notes"] += self.on_policy.finish(call.session, call.index, call.on_policy, good, fields)
            record["continuity"] = call.on_policy.continuity.as_record()
        raw = {}
        if call.raw_request is not None:
            raw["request"] = call.raw_request
        if call.raw_response is not None:
            raw["response"] = call.raw_response
        try:
            self.recorder.write(call.session, record, raw, nonfinite=call.nonfinite)
        except RecordWriteError as exc:
            log.error("call %s (%s %s) failed: %s", call.call_id, call.method, call.endpoint, exc)
            return exc
        except Exception as exc:  # e.g. a value no encoder takes: never a success without a record
            log.exception("could not encode the trace record of call %s", call.call_id)
            return RecordWriteError(str(self.recorder.path(call.session)), OSError(0, f"{type(exc).__name__}: {exc}"))
        return None
