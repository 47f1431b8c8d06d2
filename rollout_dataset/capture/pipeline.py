"""ONE capture pipeline for every environment: backend? -> proxy -> environment -> trace -> export ->
documents -> write -> validate -> push.

`capture_rollout(config)` finds the environment of `config` in the one registry
(`rollout_dataset.envs.registry`; `CaptureConfig` is coding's) and runs `run_capture`:

1. `environment.prepare(config)` picks the task and checks the settings before anything starts
   (an out-of-range index, a bad harness, no sandbox: refused at once);
2. the local backend with the environment's scripted player starts unless a base URL is given
   (`capture.model_server.model_server`), and the recording proxy in front (one session per rollout);
3. `episode.run(AgentContext)`: the agent plays against the proxy's session URL with a dummy key
   (the proxy sends the real one upstream); a failed first call stops everything with the
   named upstream error;
4. the session's trace is read back checked against the proxy's seal;
5. export (`rollout_dataset.export`), then `episode.score(...)` while the episode's resources
   (sandboxes) are still open;
6. documents (`rollout_dataset.documents`) -> artifacts written with
   secrets redacted (`capture.artifacts`) -> validated (`schema.check.check_artifact_dir`) ->
   pushed to `settings.push_repo` when given and clean.

This module imports no concrete environment: it gets them from the registry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from rollout_dataset.artifact_files import SUMMARY_FILE, TASK_FILE, TRAJECTORY_FILE
from rollout_dataset.atif.export import trajectory_document
from rollout_dataset.capture.artifacts import utc_now, write_artifacts
from rollout_dataset.capture.result import CaptureResult
from rollout_dataset.documents import RolloutCounts, rollout_files, samples_text, summary_document
from rollout_dataset.hub.artifact_push import push_artifacts
from rollout_dataset.capture.secrets import collect_secrets, new_dummy_key, redact_text
from rollout_dataset.capture.model_server import (
    context_length,
    first_call_failure,
    load_offline_tokenizer,
    model_server,
    raise_first_call,
    read_sealed_trace,
    resolve_model,
    upstream_target,
)
from rollout_dataset.envs.base import AgentContext, Environment
from rollout_dataset.proxy.context_fit import CONTEXT_EXHAUSTED, ContextPolicy, exhausted_call, summarize_fitting

__all__ = ["capture_rollout", "run_capture", "environment_of"]

logger = logging.getLogger(__name__)


def environment_of(config: Any) -> Environment:
    """The registered environment a rollout configuration belongs to (its class's `env_name`).

    Args:
        config: a rollout configuration (`CaptureConfig`, `CrafterRolloutConfig`, a plugin's).

    Returns:
        The environment.

    Raises:
        ConfigError: the configuration names no registered environment.
    """
    from rollout_dataset.envs.registry import get_environment

    environment: Environment = get_environment(getattr(config, "env_name", "coding"))
    return environment


def capture_rollout(config: Any, environment: Environment | None = None) -> CaptureResult:
    """Capture one rollout of any environment and write its artifact folder.

    Args:
        config: the rollout's configuration (`CaptureConfig` for coding, `CrafterRolloutConfig`, ...).
        environment: the environment (default: the one `config` belongs to, from the registry).

    Returns:
        The result; `result.ok` is False (exit code 1) on held-out leakage, artifacts that do not
        validate, or a failed push. A timed-out rollout still writes everything it captured.

    Raises:
        TaskIndexError: the task index is outside the task list (the message names the range).
        TaskSourceError: the task source cannot be read.
        UpstreamStatusError: the first model call answered 4xx/5xx (status and URL named).
        UpstreamError: the model server could not be reached on the first call.
        SandboxUnavailableError: the allow-list sandbox cannot be built here and `unsafe_sandbox` is off.
        ConfigError / ValueError: a bad setting (named).
    """
    return run_capture(environment or environment_of(config), config)


def _checked_extra_files(extra: dict[str, Any], core: dict[str, Any]) -> dict[str, Any]:
    """An environment's extra artifact files: plain names beside the core files, never replacing one.

    Raises:
        ConfigError: a name with a path separator, a hidden or empty name, or a core file's name.
    """
    from rollout_dataset.errors import ConfigError

    for name in extra:
        if (not isinstance(name, str) or not name or name.startswith(".") or "/" in name or "\\" in name
                or name in core or name == SUMMARY_FILE):
            raise ConfigError(f"extra artifact file {name!r}: must be a plain file name other than "
                              f"{', '.join(sorted([*core, 'summary.json']))}")
    return extra


def run_capture(environment: Environment, config: Any) -> CaptureResult:
    """The pipeline itself (see the module docstring); `capture_rollout` documents what it raises."""
    from rollout_dataset.capture.provenance import rollout_provenance
    from rollout_dataset.export import capture_level_of, export_rollout, turns_document
    from rollout_dataset.proxy import CaptureProxy

    for attribute in ("capture_settings", "prepare"):
        if not callable(getattr(environment, attribute, None)):
            from rollout_dataset.errors import ConfigError

            raise ConfigError(f"environment {getattr(environment, 'name', environment)!r} cannot capture a rollout: "
                              f"it has no {attribute}() (see rollout_dataset.envs.base.Environment)")
    t_start = time.monotonic()
    created_at = utc_now()
    settings = environment.capture_settings(config)
    rollout_id = settings.rollout_id or uuid.uuid4().hex
    episode = environment.prepare(config)  # bad settings fail before anything starts
    out_dir = Path(settings.out_dir)
    timings: dict[str, float] = {}
    dummy_key = new_dummy_key()  # the agent never holds the real key; the proxy sends it upstream
    with contextlib.ExitStack() as stack:
        trace_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rollout-trace-")))
        if settings.more_upstreams and not settings.base_url:
            from rollout_dataset.errors import ConfigError

            raise ConfigError("more model servers (--upstream) need --base-url: they serve the model it serves")
        upstream, tokenizer = stack.enter_context(model_server(settings))
        more = [upstream_target(url, settings.api_key) for url in settings.more_upstreams]  # their secrets scrubbed too
        trust_env = settings.trust_env and settings.base_url is not None  # our own local backend: directly
        target = dataclasses.replace(upstream_target(upstream, settings.api_key if settings.base_url else None),
                                     trust_env=trust_env)
        secrets = collect_secrets([settings.api_key, os.environ.get("OPENAI_API_KEY"), os.environ.get("HF_TOKEN"),
                                   dummy_key, *target.secrets, *(s for t in more for s in t.secrets)])
        model = resolve_model(settings, target)
        context = ContextPolicy(max_tokens_cap=settings.max_tokens_cap, fit_context=settings.fit_context)
        upstreams = [upstream, *settings.more_upstreams] if more else upstream
        proxy = stack.enter_context(CaptureProxy(upstream=upstreams, trace_dir=trace_dir, api_key=target.api_key,
                                                 forward_client_auth=False, on_policy=settings.on_policy,
                                                 context=context, trust_env=trust_env))
        session = episode.session or rollout_id
        trace_path = proxy.trace_path(session)
        agent = AgentContext(base_url=proxy.session_base_url(session), model=model, api_key=dummy_key,
                             report_url=target.shown("/v1/chat/completions"), trace_path=trace_path, stack=stack,
                             secrets=secrets, out_dir=out_dir,
                             context_length=lambda: context_length(settings, target, model),
                             raise_first_call=lambda record: raise_first_call(dict(record), target))
        timings["setup_s"] = time.monotonic() - t_start

        t_agent = time.monotonic()
        outcome = episode.run(agent)
        timings["agent_s"] = time.monotonic() - t_agent

        seal = proxy.seal(session)  # what the proxy wrote, from its memory: a cut or edited file shows
        records = read_sealed_trace(trace_path, seal)
        failed = first_call_failure(records)
        if failed is not None:
            raise_first_call(failed, target)
        provenance = rollout_provenance(target, model, episode.harness, _harness_version(episode))  # asks the server while it runs
        errors = list(outcome.errors)
        exhausted = exhausted_call(records)
        if exhausted is not None:  # the harness's failure is a consequence: the context is full
            outcome.stop_reason = CONTEXT_EXHAUSTED
            errors = [e for e in errors if e["kind"] not in ("upstream_error", "harness_error")]
            logger.info("rollout %s: context exhausted at call %s", rollout_id, exhausted.get("index"))
        if tokenizer is None and (settings.tokenizer or settings.base_url):
            # the model's own name is tried from the local cache only; an explicit --tokenizer may download
            tokenizer = load_offline_tokenizer(settings.tokenizer or model, allow_download=bool(settings.tokenizer))
        t_export = time.monotonic()
        capture_level = capture_level_of(records)
        document = export_rollout(records, session_id=session, capture_level=capture_level, tokenizer=tokenizer,
                                  metadata=episode.rollout_metadata(rollout_id, model, outcome))
        turns = turns_document(document, records)
        timings["export_s"] = time.monotonic() - t_export
        t_score = time.monotonic()
        score = episode.score(records, turns, outcome, agent)  # the episode's sandboxes are still open
        timings["verify_s"] = time.monotonic() - t_score

    hits = score.leakage_hits or []
    if hits:
        errors.append({"kind": "leakage", "message": f"held-out test text found in {len(hits)} place(s), first "
                                                      f"{hits[0]['where']} (test {hits[0]['test_index']} {hits[0]['field']})"})
    task = episode.task(outcome)
    facts = {"provenance": provenance, "continuity": document.get("continuity"),
             "context_fit": summarize_fitting(records, context)}
    timings["total_s"] = time.monotonic() - t_start
    summary = summary_document(
        rollout_id=rollout_id, created_at=created_at, task=task, model=model, harness=episode.harness,
        counts=RolloutCounts.of(records, document, turns), score=score, timed_out=outcome.timed_out,
        stop_reason=outcome.stop_reason, capture_level=capture_level,
        timings={k: round(timings[k], 4) for k in ("setup_s", "agent_s", "verify_s", "export_s", "total_s")},
        errors=list(errors),
        extra=episode.summary_fields(facts, outcome))
    header = {"rollout": rollout_id, **score.samples_header, "stop_reason": outcome.stop_reason}
    samples = _samples(document, records, tokenizer, header, (target, model) if settings.base_url else None)
    trace = {"schema_version": 1, "session": session, "seal": seal.to_dict(), "calls": records}
    files = rollout_files(trace=trace, document=document, turns=turns, task=task, samples=samples)
    files[TRAJECTORY_FILE] = trajectory_document(records, document, summary, files[TASK_FILE])
    files.update(_checked_extra_files(episode.extra_files(outcome), files))
    redacted = write_artifacts(out_dir, files, secrets)
    if redacted:
        errors.append({"kind": "secret_redacted", "message": f"{redacted} secret occurrence(s) were redacted from "
                       "the artifacts: a credential reached the requests (token ids may still encode it)"})
        summary["errors"] = list(errors)
    write_artifacts(out_dir, {SUMMARY_FILE: summary}, secrets)

    from rollout_dataset.schema.check import check_artifact_dir

    failures = check_artifact_dir(out_dir)
    for failure in failures:
        logger.error("artifact does not validate: %s: %s: %s", *failure)
    push_error = push_artifacts(out_dir, settings.push_repo, settings.push_private) if not failures and not hits else None
    if push_error:
        errors.append({"kind": "push_error", "message": push_error})
    logger.info("captured %s (%s): %d calls, reward %s, stop %s -> %s", rollout_id, task.env, len(records),
                score.env_reward, outcome.stop_reason, out_dir)
    # what the caller prints (the CLI) is as clean as what is on disk
    summary = json.loads(redact_text(json.dumps(summary), secrets)[0])
    errors = [{k: redact_text(v, secrets)[0] for k, v in e.items()} for e in errors]
    return CaptureResult(out_dir, rollout_id, summary, errors, failures, outcome.decisions)


def _samples(document: dict[str, Any], records: list[dict[str, Any]], tokenizer: Any, header: dict[str, Any],
             server: tuple[Any, str] | None) -> str:
    """`samples.md`: decoded by the local tokenizer, else by the server's own /detokenize (`server`:
    `(upstream target, model)`), else the header and the reason."""
    if tokenizer is not None or server is None:
        return samples_text(document, records, tokenizer, header)
    from rollout_dataset.capture.server_tokenizer import ServerTokenizer
    from rollout_dataset.errors import UpstreamError

    try:
        with ServerTokenizer(*server) as remote:
            return samples_text(document, records, remote, header)
    except UpstreamError as exc:
        logger.warning("samples.md: no local tokenizer and the server could not decode: %s", exc)
        status = getattr(exc, "status", None)  # the URL stays out: the upstream host is not recorded
        return samples_text(document, records, None, header, reason=(
            "No local tokenizer (--tokenizer) and the server's /detokenize failed "
            f"({f'HTTP {status}' if status else type(exc).__name__}), so the token stream is not rendered."))


def _harness_version(episode: Any) -> str | None:
    """The episode's `harness_version()` (optional: an environment that knows its harness's version)."""
    probe = getattr(episode, "harness_version", None)
    return probe() if callable(probe) else None
