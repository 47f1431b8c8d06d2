"""Capture ONE rollout end to end: task, servers, harness, verifier, leakage scan, artifacts, validation.

Orchestration only; each step is another module's job:

1. pick the task (`rollout_dataset.tasks`): an out-of-range index fails here, at once;
2. start the local backend (`oracle` policy) unless a base URL is given, and the recording proxy
   in front (one proxy session per rollout, named by the rollout id);
3. run the harness (built-in or external) in a sandbox (`rollout_dataset.harness`) that hides the
   held-out data: the task's files, the output folder and the folder of its sibling rollouts
   (`rollout_dataset.capture.hiding`); the first model
   call answering 4xx/5xx stops everything at once with `UpstreamStatusError` (status and URL);
4. verify `solution.py` on the held-out tests in fresh sandboxes (`rollout_dataset.sandbox`);
5. scan requests and working files for held-out text (`rollout_dataset.capture.leakage`);
6. build the rollout document, the turns and the samples (`rollout_dataset.export`, `render`);
7. write the artifacts with secrets redacted, validate them (`rollout_dataset.schema.check`),
   and push to `config.push_repo` when given.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import httpx

from rollout_dataset.capture.artifacts import write_artifacts
from rollout_dataset.capture.config import CaptureConfig, CaptureResult
from rollout_dataset.capture.hiding import capture_hidden_paths
from rollout_dataset.capture.leakage import scan_for_leaks
from rollout_dataset.capture.push import push_artifacts
from rollout_dataset.proxy.tokens import GENERATION_ENDPOINTS
from rollout_dataset.rewards.penalties import compute_penalties, reward_after_penalties
from rollout_dataset.capture.secrets import collect_secrets, new_dummy_key, redact_text
from rollout_dataset.capture.threads import serve_in_thread
from rollout_dataset.capture.workdir import copy_workdir
from rollout_dataset.errors import UpstreamError, UpstreamStatusError
from rollout_dataset.proxy.upstream import UpstreamTarget, parse_upstream
from rollout_dataset.harness.presets import CONTEXT_AWARE_PRESETS
from rollout_dataset.proxy.context_fit import CONTEXT_EXHAUSTED, ContextPolicy, exhausted_call, summarize_fitting

__all__ = ["capture_rollout", "harness_statement", "first_call_failure", "SOLUTION_NOTE"]

logger = logging.getLogger(__name__)

SOLUTION_NOTE = ("Write your solution as a Python 3 program in the file solution.py in the current working "
                 "directory. It reads the input from standard input and writes the answer to standard output.")
LOCAL_MAX_MODEL_LEN = 131072
_IMPORT_LOCK = threading.Lock()


def harness_statement(instruction: str) -> str:
    """The statement every harness gets: the task instruction plus where the solution goes.

    Args:
        instruction: the task's instruction (with its worked examples).

    Returns:
        The text given to the harness.
    """
    return instruction.rstrip() + "\n\n" + SOLUTION_NOTE + "\n"


def first_call_failure(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first generation call, if it failed (HTTP 4xx/5xx or no answer at all).

    Args:
        records: trace records in arrival order.

    Returns:
        That record, or None when the first generation call succeeded (or none was made yet).
    """
    for record in records:
        if record.get("endpoint") not in GENERATION_ENDPOINTS:
            continue
        if (record.get("error") or {}).get("kind") == CONTEXT_EXHAUSTED:
            return None  # the proxy's own answer: the rollout ends with stop reason context_exhausted
        status = record.get("status")
        if (isinstance(status, int) and status >= 400) or (status is None and record.get("error")):
            return record
        return None
    return None


def upstream_target(base_url: str, api_key: str | None) -> UpstreamTarget:
    """The capture's upstream: credentials of the URL or the real key, for the proxy only.

    Userinfo in the URL wins over the key (the key is then not sent; logged without its value).

    Args:
        base_url: the model server's base URL (the local backend's, or ``--base-url``).
        api_key: the real upstream key, or None.

    Returns:
        The parsed upstream (`rollout_dataset.proxy.upstream.parse_upstream`).

    Raises:
        ValueError: not an http(s) URL (the message shows it redacted).
    """
    target = parse_upstream(base_url)
    if target.authorization is None and api_key:
        return parse_upstream(base_url, api_key)
    if target.authorization is not None and api_key:
        logger.info("the upstream URL %s carries credentials: OPENAI_API_KEY is not sent to it", target.display)
    return target


def _raise_first_call(record: dict[str, Any], target: UpstreamTarget) -> None:
    url = target.shown(record.get("endpoint") or "/v1/chat/completions")
    status = record.get("status")
    body = ""
    response = record.get("response")
    if isinstance(response, dict):
        err = response.get("error")
        body = target.scrub(str(err.get("message", err) if isinstance(err, dict) else (err or "")))[:300]
    if isinstance(status, int) and status >= 400 and status != 502:
        raise UpstreamStatusError(status, url, body)
    message = target.scrub(str((record.get("error") or {}).get("message", "no answer")))
    if isinstance(status, int):
        raise UpstreamStatusError(status, url, message)
    raise UpstreamError(f"model server unreachable at {url}: {message}")


def _read_sealed_trace(path: Path, seal: Any) -> list[dict[str, Any]]:
    """The session's records, checked against the proxy's seal (count and last digest) and chain.

    Raises:
        TraceIntegrityError: the file is gone, cut, reordered or edited (names the file and record).
    """
    from rollout_dataset.errors import TraceIntegrityError
    from rollout_dataset.proxy import read_trace

    if not path.exists():
        if seal.records:
            raise TraceIntegrityError(str(path), 0, f"the proxy wrote {seal.records} record(s) but the file is gone")
        return []
    return read_trace(path, seal=seal)


class _TraceWatch:
    """Polls a session's trace file; says stop when the first generation call failed or the context is full."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = -1
        self.failed: dict[str, Any] | None = None

    def __call__(self) -> str | None:
        from rollout_dataset.proxy import read_trace

        try:
            size = self.path.stat().st_size
        except OSError:
            return None
        if size == self.size:
            return None
        self.size = size
        records = read_trace(self.path)
        self.failed = first_call_failure(records)
        if self.failed:
            return "upstream_error"
        return CONTEXT_EXHAUSTED if exhausted_call(records) is not None else None


@contextlib.contextmanager
def _model_server(config: CaptureConfig) -> Iterator[tuple[str, Any]]:
    """Yield (upstream base URL, tokenizer-or-None)."""
    if config.base_url:
        yield config.base_url.rstrip("/"), None
        return
    from rollout_dataset.backend import LocalBackend, make_policy
    from rollout_dataset.envs.policies import register_builtin_policies
    from rollout_dataset.tokenizers import load_tokenizer

    with _IMPORT_LOCK:  # transformers' lazy imports are not thread-safe (concurrent captures)
        register_builtin_policies()
        tokenizer = load_tokenizer(config.tokenizer or "builtin")
    kwargs: dict[str, Any] = {}
    if config.policy == "script":
        if not config.script:
            raise ValueError("--policy script needs --script FILE")
        kwargs["script"] = str(config.script)
    with _IMPORT_LOCK:
        policy = make_policy(config.policy, **kwargs)
    # A long context, so harnesses that ask for large completions (opencode: max_tokens 32000) fit.
    with serve_in_thread(lambda: LocalBackend(tokenizer=tokenizer, policy=policy, max_model_len=config.local_max_model_len,
                                              served_model_name=config.served_model_name),
                         name="local-backend") as backend:
        yield backend.base_url, tokenizer


def _model_cards(target: UpstreamTarget) -> list[Any]:
    """The server's `/v1/models` list.

    Raises:
        UpstreamError: the server is unreachable or answers no model list (the URL shown redacted).
    """
    shown = target.shown("/v1/models")
    try:
        response = target.get("/v1/models")
    except httpx.HTTPError as exc:
        raise UpstreamError(f"model server unreachable at {shown}: {target.scrub(str(exc))}") from None
    if response.status_code >= 400:
        raise UpstreamStatusError(response.status_code, shown, target.scrub(response.text))
    try:
        cards = response.json()["data"]
    except (ValueError, KeyError, TypeError):
        raise UpstreamError(f"{shown} lists no model; pass --model") from None
    return cards if isinstance(cards, list) else []


def _resolve_model(config: CaptureConfig, target: UpstreamTarget) -> str:
    if config.model:
        return config.model
    if not config.base_url:
        return config.served_model_name
    try:
        return _model_cards(target)[0]["id"]
    except (KeyError, IndexError, TypeError):
        raise UpstreamError(f"{target.shown('/v1/models')} lists no model; pass --model") from None


def _context_length(config: CaptureConfig, target: UpstreamTarget, model: str) -> int | None:
    """The model's `max_model_len` as the server reports it (None when it does not say)."""
    if not config.base_url:
        return config.local_max_model_len
    try:
        cards = _model_cards(target)
    except UpstreamError as exc:  # the harness's own first call will name the failure
        logger.warning("context length of %s unknown: %s", model, exc)
        return None
    for card in cards:
        if isinstance(card, dict) and card.get("id") == model and isinstance(card.get("max_model_len"), int):
            return card["max_model_len"]
    return None


def _cached_or_local(name: str) -> bool:
    """True when `name` is `builtin`, a local folder, or a Hub id whose tokenizer is in the HF cache."""
    if name == "builtin" or Path(name).expanduser().exists():
        return True
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(name, "tokenizer_config.json")
    except Exception:  # not a valid repo id
        return False
    return isinstance(found, str)


def _load_offline_tokenizer(name: str, *, allow_download: bool = True) -> Any:
    from rollout_dataset.tokenizers import load_tokenizer

    if not allow_download and not _cached_or_local(name):
        logger.warning("tokenizer %r is not cached locally (pass --tokenizer to fetch it): samples.md is written "
                       "without the token stream", name)
        return None
    try:
        with _IMPORT_LOCK:
            return load_tokenizer(name)
    except Exception as exc:  # a missing tokenizer only costs the cross-check and the samples
        logger.warning("tokenizer %r not available (%s): samples.md is written without the token stream", name, exc)
        return None


def _now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _agent_tool_counts(turns_doc: dict[str, Any]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for turn in turns_doc.get("turns", []):
        if turn.get("role", "agent") == "agent":
            counts.update(name for name in turn.get("tool_calls") or [] if isinstance(name, str))
    return dict(sorted(counts.items()))


def _trainable_tokens(document: dict[str, Any]) -> int:
    stats = document.get("stats") or {}
    if "n_trainable_tokens" in stats:
        return int(stats["n_trainable_tokens"])
    return sum(int(s.get("n_trainable") or 0) for s in document.get("sequences") or [] if s.get("trainable"))


def _findings_count(document: dict[str, Any]) -> int:
    findings = list(document.get("findings") or [])
    for seq in document.get("sequences") or []:
        findings.extend(seq.get("findings") or [])
    return sum(1 for f in findings if isinstance(f, dict) and f.get("level") in ("ERROR", "WARN"))


def _samples(document: dict[str, Any], records: list[dict[str, Any]], tokenizer: Any, header: dict,
             server: tuple[UpstreamTarget, str] | None = None) -> str:
    """samples.md: decoded by the local tokenizer, else by the server's own /detokenize (`server` =
    (upstream target, model)); only when neither works, the header and the reason."""
    from rollout_dataset.render import render_samples

    reason = "No tokenizer was available (--tokenizer), so the token stream is not rendered."
    if tokenizer is not None:
        return render_samples(document, records, tokenizer, header=header)
    if server is not None:
        from rollout_dataset.capture.server_tokenizer import ServerTokenizer
        from rollout_dataset.errors import UpstreamError

        try:
            with ServerTokenizer(*server) as remote:
                return render_samples(document, records, remote, header=header)
        except UpstreamError as exc:
            logger.warning("samples.md: no local tokenizer and the server could not decode: %s", exc)
            status = getattr(exc, "status", None)  # the URL stays out: the upstream host is not recorded
            reason = ("No local tokenizer (--tokenizer) and the server's /detokenize failed "
                      f"({f'HTTP {status}' if status else type(exc).__name__}), so the token stream is not rendered.")
    lines = [f"# Rollout {header.get('rollout')}", ""]
    lines += [f"- {k}: {v}" for k, v in header.items()]
    lines += ["", reason]
    return "\n".join(lines) + "\n"


def capture_rollout(config: CaptureConfig) -> CaptureResult:
    """Capture one rollout and write its artifact folder.

    Args:
        config: what to capture.

    Returns:
        The result; `result.ok` is False (exit code 1) on held-out leakage, artifacts that do not
        validate, or a failed push. A timed-out rollout still writes everything it captured.

    Raises:
        TaskIndexError: the task index is outside the task list (the message names the range).
        TaskSourceError: the task source cannot be read.
        UpstreamStatusError: the first model call answered 4xx/5xx (status and URL named).
        UpstreamError: the model server could not be reached on the first call.
        SandboxUnavailableError: the allow-list sandbox cannot be built here and `unsafe_sandbox` is off
            (raised before anything starts).
        ValueError: a bad setting (unknown harness, a `sandbox_ro_paths` entry exposing task data, ...).
    """
    from rollout_dataset.harness import BuiltinAgent, ToolBox, resolve_harness, run_external_harness
    from rollout_dataset.harness.tools import sandbox_runner
    from rollout_dataset.proxy import CaptureProxy, read_trace
    from rollout_dataset.sandbox import Sandbox, verify_solution
    from rollout_dataset.sandbox.isolation import check_sandbox_ro_paths, require_isolation
    from rollout_dataset.tasks import load_tasks, select_task
    from rollout_dataset.tasks.model import visible_tests_text

    t_start = time.monotonic()
    created_at = _now_iso()
    rollout_id = config.rollout_id or uuid.uuid4().hex
    preset = resolve_harness(config.harness)  # bad --harness fails before anything starts
    isolation = require_isolation(config.unsafe_sandbox)  # no sandbox, no untrusted code (unless opted out)
    check_sandbox_ro_paths(config.sandbox_ro_paths, [config.out_dir])
    tasks = load_tasks(config.tasks, n_prompts=config.n_prompts, seed=config.seed)
    task = select_task(tasks, config.task_index)
    rollout_seed = config.effective_rollout_seed
    statement = harness_statement(task.instruction)
    out_dir = Path(config.out_dir)
    logger.info("task index=%d id=%s held_out=%d dataset_seed=%d rollout_seed=%d", config.task_index,
                task.task_id, len(task.held_out_tests), config.seed, rollout_seed)

    timings: dict[str, float] = {}
    errors: list[dict[str, str]] = []
    decisions: list[dict[str, Any]] = []
    exit_code: int | None = None
    # The harness never holds the real key: it gets a per-rollout dummy key, the proxy drops it and
    # sends the real one (or the URL's credentials) upstream.
    dummy_key = new_dummy_key()
    with contextlib.ExitStack() as stack:
        trace_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rollout-trace-")))
        upstream, tokenizer = stack.enter_context(_model_server(config))
        target = upstream_target(upstream, config.upstream_api_key)
        secrets = collect_secrets([config.api_key, os.environ.get("OPENAI_API_KEY"), os.environ.get("HF_TOKEN"),
                                   dummy_key, *target.secrets])
        model = _resolve_model(config, target)
        if preset is not None and preset.name in CONTEXT_AWARE_PRESETS and config.fit_context:
            preset = resolve_harness(config.harness, context_tokens=_context_length(config, target, model),
                                     output_tokens=config.max_tokens_cap) or preset
        context = ContextPolicy(max_tokens_cap=config.max_tokens_cap, fit_context=config.fit_context)
        proxy = stack.enter_context(CaptureProxy(upstream=upstream, trace_dir=trace_dir,
                                                 api_key=target.api_key, forward_client_auth=False,
                                                 on_policy=config.on_policy, context=context))
        session = rollout_id
        harness_url = proxy.session_base_url(session)
        trace_path = proxy.trace_path(session)
        # held-out isolation: the agent's code runs in the allow-list root (none of the task files, this
        # rollout's folder, its siblings or the trace are in it); these paths are masked as a second line
        hidden = capture_hidden_paths(task, out_dir, config.hide_paths)
        box = stack.enter_context(Sandbox(hide_paths=hidden, unsafe=config.unsafe_sandbox))
        timings["setup_s"] = time.monotonic() - t_start

        t_agent = time.monotonic()
        if preset is None:
            toolbox = ToolBox(box.workdir, [(t.input, t.output) for t in task.visible_tests], sandbox_runner(box))
            agent = BuiltinAgent(harness_url, model, toolbox, api_key=dummy_key,
                                 max_turns=config.max_turns, timeout_s=config.timeout_s, seed=rollout_seed,
                                 temperature=config.temperature, max_tokens=config.max_tokens,
                                 report_url=target.shown("/v1/chat/completions"))
            outcome = agent.run(statement)
            stop_reason, timed_out = outcome.stop_reason, outcome.timed_out
            decisions = outcome.decisions
            if outcome.error:
                errors.append({"kind": "upstream_error", "message": outcome.error})
        else:
            watch = _TraceWatch(trace_path)
            ext = run_external_harness(preset.command, base_url=harness_url, model=model, workdir=box.workdir,
                                       instruction=statement, api_key=dummy_key,
                                       timeout_s=config.timeout_s, env=preset.env, should_stop=watch,
                                       hide_paths=hidden, ro_paths=[*preset.ro_paths, *config.sandbox_ro_paths],
                                       unsafe=config.unsafe_sandbox)
            stop_reason, timed_out, exit_code = ext.stop_reason, ext.timed_out, ext.exit_code
            watch()  # the last calls' records
            if ext.stop_reason == "upstream_error" or watch.failed:
                _raise_first_call(watch.failed or first_call_failure(read_trace(trace_path)) or {}, target)
            if ext.stop_reason == "harness_exit" and ext.exit_code not in (0, None):
                errors.append({"kind": "harness_error", "message":
                               f"{preset.name} exited with status {ext.exit_code}: {ext.stderr_tail[-600:]}"})
                stop_reason = "harness_error"
        timings["agent_s"] = time.monotonic() - t_agent

        seal = proxy.seal(session)  # what the proxy wrote, from its memory: a cut or edited file shows
        records = _read_sealed_trace(trace_path, seal)
        failed = first_call_failure(records)
        if failed is not None and preset is None:
            _raise_first_call(failed, target)
        exhausted = exhausted_call(records)
        if exhausted is not None:  # the harness's failure is a consequence: the context is full
            stop_reason = CONTEXT_EXHAUSTED
            errors = [e for e in errors if e["kind"] not in ("upstream_error", "harness_error")]
            logger.info("rollout %s: context exhausted at call %s", rollout_id, exhausted.get("index"))

        from rollout_dataset.capture.provenance import rollout_provenance

        provenance = rollout_provenance(target, model, config.harness)
        t_verify = time.monotonic()
        verdict = verify_solution(task, box.workdir, unsafe=config.unsafe_sandbox)
        timings["verify_s"] = time.monotonic() - t_verify
        hits = scan_for_leaks(statement, task.held_out_tests, records, box.workdir)
        if config.keep_workdir:
            copy_workdir(box.workdir, out_dir, secrets)
        if tokenizer is None and (config.tokenizer or config.base_url):
            # the model's own name is tried from the local cache only; an explicit --tokenizer may download
            tokenizer = _load_offline_tokenizer(config.tokenizer or model, allow_download=bool(config.tokenizer))

    t_export = time.monotonic()
    from rollout_dataset.export import capture_level_of, export_rollout, turns_document

    capture_level = capture_level_of(records)
    metadata = {"rollout_id": rollout_id, "task_id": task.task_id, "model": model, "harness": config.harness,
                "env": "coding", "rollout_seed": rollout_seed}
    document = export_rollout(records, session_id=session, metadata=metadata, capture_level=capture_level,
                              tokenizer=tokenizer)
    turns = turns_document(document, records)
    timings["export_s"] = time.monotonic() - t_export

    if hits:
        errors.append({"kind": "leakage", "message": f"held-out test text found in {len(hits)} place(s), first "
                                                      f"{hits[0].where} (test {hits[0].test_index} {hits[0].field})"})
    by_name = _agent_tool_counts(turns)
    ran_code = None if preset is not None else any(d.get("ran_code") for d in decisions)
    penalties = compute_penalties(by_name, ran_code, config.penalties)
    env_reward = verdict.env_reward
    passed = verdict.passed if env_reward is not None else None
    timings["total_s"] = time.monotonic() - t_start
    summary: dict[str, Any] = {
        "schema_version": 1, "rollout_id": rollout_id, "created_at": created_at, "env": "coding",
        "model": model, "harness": config.harness, "task_id": task.task_id, "task_index": config.task_index,
        "dataset_seed": config.seed, "rollout_seed": rollout_seed, "captured_calls": len(records),
        "agent_turns": sum(1 for t in turns["turns"] if t.get("role", "agent") == "agent"),
        "trained_turns": sum(1 for t in turns["turns"] if t.get("trained") is True),
        "tool_calls_by_name": by_name, "tool_calls_total": sum(by_name.values()),
        "held_out_tests": len(task.held_out_tests), "held_out_passed": passed, "env_reward": env_reward,
        "reward_after_penalties": reward_after_penalties(env_reward, penalties), "penalties": penalties,
        "unscored_reason": verdict.unscored_reason, "timed_out": timed_out, "stop_reason": stop_reason, "capture_level": capture_level,
        "trainable": bool(document.get("trainable")),
        "trainable_tokens": _trainable_tokens(document),
        "findings_count": _findings_count(document),
        "leakage": {"checked": True, "hits": [h.to_dict() for h in hits]},
        "timings": {k: round(v, 4) for k, v in timings.items()},
        "errors": list(errors), "harness_exit_code": exit_code, "isolation": isolation,
        "provenance": provenance,
        "continuity": document.get("continuity"),
        "context_fit": summarize_fitting(records, context),
    }
    header = {"rollout": rollout_id, "task": task.task_id, "reward": env_reward,
              "passed": f"{passed}/{len(task.held_out_tests)}" if passed is not None else None,
              "stop_reason": stop_reason}
    files = {
        "trace.json": {"schema_version": 1, "session": session, "seal": seal.to_dict(), "calls": records},
        "rollout.json": document,
        "turns.json": turns,
        "task.json": {"schema_version": 1, "env": "coding", "task_id": task.task_id,
                      "task_index": config.task_index, "title": task.title, "instruction": task.instruction,
                      "source": task.source, "dataset_seed": config.seed, "rollout_seed": rollout_seed,
                      "n_prompts": config.n_prompts,
                      "config": {**config.public_dict(), "model": model, "statement_suffix": SOLUTION_NOTE}},
        "visible_tests.txt": visible_tests_text(task),
        "held_out_tests.json": {"schema_version": 1, "task_id": task.task_id,
                                "tests": [{"input": t.input, "output": t.output} for t in task.held_out_tests]},
        "summary.json": summary,
        "samples.md": _samples(document, records, tokenizer, header,
                               (target, model) if config.base_url else None),
    }
    summary_doc = files.pop("summary.json")
    redacted = write_artifacts(out_dir, files, secrets)
    if redacted:
        errors.append({"kind": "secret_redacted", "message": f"{redacted} secret occurrence(s) were redacted from "
                       "the artifacts: a credential reached the requests (token ids may still encode it)"})
        summary_doc["errors"] = list(errors)
    write_artifacts(out_dir, {"summary.json": summary_doc}, secrets)

    from rollout_dataset.schema.check import check_artifact_dir

    failures = check_artifact_dir(out_dir)
    for failure in failures:
        logger.error("artifact does not validate: %s: %s: %s", *failure)
    push_error = push_artifacts(out_dir, config.push_repo, config.push_private) if not failures and not hits else None
    if push_error:
        errors.append({"kind": "push_error", "message": push_error})
    logger.info("captured %s: %d calls, reward %s, stop %s -> %s", rollout_id, len(records), env_reward,
                stop_reason, out_dir)
    # what the caller prints (the CLI) is as clean as what is on disk
    summary = json.loads(redact_text(json.dumps(summary), secrets)[0])
    errors = [{k: redact_text(v, secrets)[0] for k, v in e.items()} for e in errors]
    return CaptureResult(out_dir, rollout_id, summary, errors, failures, decisions)
