"""Synthetic, schema-faithful artifact folders: fixtures for tests and benchmarks.

`write_synthetic_rollout` writes one artifact folder whose documents follow the shipped JSON
Schemas (summary, task, held_out_tests, trace with trace records) and the layout of
docs/architecture.md: an agent root that grows by (sampled + tool result) tokens each turn up to
the requested context, optionally a toolless title-generator root (auxiliary) and a discarded
retry. Token ids come from a seeded generator; message text is a deterministic word per id, so
text and ids have the same information content as a real capture (``text="random"``, fast, for
tests), or ids are real code (Python standard-library sources) encoded with the project's built-in
tokenizer and text is their decoding (``text="code"``, for storage measurements that need realistic
compressibility). `summary.json`, `task.json` and `held_out_tests.json` come from the one place that
builds them for every capture (`rollout_dataset.documents`).
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from rollout_dataset.documents import RolloutCounts, held_out_document, summary_document, task_document
from rollout_dataset.envs.base import Score, TaskInfo
from rollout_dataset.trace_integrity import reseal

__all__ = ["write_synthetic_rollout", "write_synthetic_dataset"]

_VOCAB = 32000
_WORDS: list[str] | None = None


def _words() -> list[str]:
    global _WORDS
    if _WORDS is None:
        rng = np.random.default_rng(12345)
        letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
        _WORDS = ["".join(rng.choice(letters, size=int(rng.integers(2, 8)))) for _ in range(_VOCAB)]
    return _WORDS


_CORPUS: dict[str, Any] = {}


def _code_corpus(max_chars: int = 600_000) -> tuple[np.ndarray, Any]:
    """Token ids of Python standard-library sources (sorted files, first `max_chars`) + the tokenizer."""
    if "ids" not in _CORPUS:
        import sysconfig

        from rollout_dataset.tokenizers import encode_text, load_tokenizer

        tok = load_tokenizer("builtin")
        parts, size = [], 0
        for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
            text = path.read_text(encoding="utf-8", errors="replace")
            parts.append(text)
            size += len(text)
            if size >= max_chars:
                break
        _CORPUS["ids"] = np.asarray(encode_text(tok, "".join(parts)[:max_chars]), dtype=np.int32)
        _CORPUS["tok"] = tok
    return _CORPUS["ids"], _CORPUS["tok"]


def _text(ids: np.ndarray, mode: str = "random") -> str:
    if mode == "code":
        return _code_corpus()[1].decode(ids.tolist())
    words = _words()
    return " ".join(words[i] for i in ids.tolist())


def _call(index: int, session: str, prompt: np.ndarray, out: np.ndarray, logps: np.ndarray,
          messages: list[dict[str, Any]], tools: list[dict[str, Any]], finish: str, seed: int,
          mode: str) -> dict[str, Any]:
    params = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 4096, "seed": seed}
    message: dict[str, Any] = {"role": "assistant", "content": _text(out, mode)}
    request = {"model": "local", "messages": messages, **params}
    if tools:
        request["tools"] = tools
    return {
        "schema_version": 1, "index": index, "call_id": uuid.uuid4().hex, "session": session,
        "harness_session_id": None, "started_at": 1.7e9 + index, "ended_at": 1.7e9 + index + 0.5,
        "latency_ms": 500.0, "ttft_ms": None, "method": "POST", "endpoint": "/v1/chat/completions",
        "stream": False, "status": 200, "request_headers": {"content-type": "application/json"},
        "request": request,
        "upstream_changes": {"return_token_ids": True, "logprobs": True},
        "response": {
            "id": f"chatcmpl-{index}", "object": "chat.completion", "model": "local",
            "prompt_token_ids": prompt.tolist(),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "token_ids": out.tolist(),
                         "logprobs": {"content": [{"token": f"token_id:{t}", "logprob": float(lp), "bytes": None,
                                                   "top_logprobs": []} for t, lp in zip(out.tolist(), logps.tolist())]}}],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(out),
                      "total_tokens": len(prompt) + len(out)},
        },
        "prompt_token_ids": prompt.tolist(), "completion_token_ids": out.tolist(),
        "per_token_logps": logps.tolist(), "finish_reason": finish,
        "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(out), "total_tokens": len(prompt) + len(out)},
        "requested_sampling_params": params, "effective_sampling_params": {**params, "logprobs": True},
        "capture_level": "tokens", "token_source": "return_token_ids", "notes": [], "error": None,
    }


def write_synthetic_rollout(folder: str | Path, *, n_turns: int = 5, context_tokens: int = 2048, seed: int = 0,
                            with_aux: bool = True, with_retry: bool = False, with_tests: bool = True,
                            task_index: int = 0, model: str = "local", rollout_id: str | None = None,
                            text: str = "random") -> str:
    """Write one synthetic artifact folder.

    Args:
        folder: where to write (created).
        n_turns: agent turns (model calls on the agent path).
        context_tokens: tokens of the final agent sequence.
        seed: seeds ids, logprobs and rewards.
        with_aux: add a toolless title-generator call (an auxiliary root).
        with_retry: add a retry of the second agent turn that did not continue (discarded, not in
            rollout.json's sequences).
        with_tests: False writes an environment without tests (empty visible/held-out tests) that reports
            Crafter-like `env_metrics` in summary.json.
        task_index: the task index.
        model: the model name.
        rollout_id: the rollout id (default: a fresh uuid4 hex).
        text: ``"random"`` (seeded random ids, a word per id) or ``"code"`` (real code through the
            built-in tokenizer; slower, realistic compressibility).

    Returns:
        The rollout id.
    """
    rng = np.random.default_rng(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rid = rollout_id or uuid.uuid4().hex
    session = f"s{seed}"
    tools = [{"type": "function", "function": {"name": "run", "description": "run code",
                                               "parameters": {"type": "object", "properties": {}}}}]
    sys_len = max(16, context_tokens // 10)
    growth = max(4, (context_tokens - sys_len) // max(n_turns, 1))
    n_out = max(2, growth * 2 // 5)
    n_tool = max(1, growth - n_out)
    calls: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    sequences: list[dict[str, Any]] = []

    if text not in ("random", "code"):
        raise ValueError(f"text must be 'random' or 'code', not {text!r}")

    def ids(n: int) -> np.ndarray:
        if text == "code":
            corpus = _code_corpus()[0]
            start = int(rng.integers(0, len(corpus) - n)) if len(corpus) > n else 0
            return np.resize(corpus[start:start + n], n).astype(np.int32)
        return rng.integers(0, _VOCAB, size=n, dtype=np.int64).astype(np.int32)

    def words(x: np.ndarray) -> str:
        return _text(x, text)

    def logps(n: int) -> np.ndarray:
        return (-rng.exponential(0.5, size=n)).astype(np.float32).astype(np.float64)

    graph_calls: list[dict[str, Any]] = []

    def add_turn(prompt, out, lps, role, trained, tool_calls, messages, tool_list, finish, parent):
        idx = len(calls)
        calls.append(_call(idx, session, prompt, out, lps, messages, tool_list, finish, seed, text))
        names = [c["name"] for c in tool_calls]
        turns.append({"turn": len(turns), "call_index": idx, "role": role, "trained": trained,
                      "tool_calls": names, "n_prompt_ids": len(prompt), "n_output_ids": len(out),
                      "prompt_ids": prompt.tolist(), "output_ids": out.tolist(), "per_token_logps": lps.tolist(),
                      "mask": [0] * len(prompt) + [1] * len(out), "finish_reason": finish})
        if parent is not None:
            graph_calls[parent]["children"].append(idx)
        graph_calls.append({
            "index": idx, "call_id": calls[-1]["call_id"], "endpoint": "/v1/chat/completions", "parent": parent,
            "root": idx if parent is None else graph_calls[parent]["root"], "children": [], "role": role,
            "discarded": role == "discarded", "trained": trained, "n_prompt_ids": len(prompt),
            "n_sampled_ids": len(out), "n_tools": len(tool_list), "tool_calls": names, "finish_reason": finish,
            "harness_session_id": None, "requested_sampling_params": calls[-1]["requested_sampling_params"],
            "effective_sampling_params": calls[-1]["effective_sampling_params"], "findings": []})
        return idx

    if with_aux:
        p, o, lp = ids(24), ids(6), logps(6)
        i = add_turn(p, o, lp, "auxiliary", False, [], [{"role": "system", "content": "title generator"},
                                                         {"role": "user", "content": words(p)}], [], "stop",
                     None)
        sequences.append({"role": "auxiliary", "trainable": False, "root_id": i, "node_ids": [i], "n_turns": 1,
                          "prompt_len": len(p), "n_trainable": 0, "turn_lengths": [len(o)],
                          "input_ids": np.concatenate([p, o]).tolist(), "loss_mask": [0] * (len(p) + len(o)),
                          "logprobs": [0.0] * len(p) + lp.tolist(), "findings": []})
    prompt = ids(sys_len)
    messages: list[dict[str, Any]] = [{"role": "system", "content": words(prompt[: sys_len // 2])},
                                      {"role": "user", "content": words(prompt[sys_len // 2:])}]
    mask: list[int] = [0] * sys_len
    all_lps: list[float] = [0.0] * sys_len
    node_ids, lengths = [], []
    retry_pending = with_retry
    parent = None
    for t in range(n_turns):
        out, lp = ids(n_out), logps(n_out)
        last = t == n_turns - 1
        call = [] if last else [{"name": "run", "arguments": json.dumps({"code": f"step {t}"})}]
        if retry_pending and t == 1:
            r_out, r_lp = ids(n_out), logps(n_out)
            add_turn(prompt, r_out, r_lp, "discarded", False, call, list(messages), tools, "tool_calls", parent)
            retry_pending = False
        i = add_turn(prompt, out, lp, "agent", True, call, list(messages), tools, "stop" if last else "tool_calls",
                     parent)
        parent = i
        node_ids.append(i)
        lengths.append(n_out)
        mask += [1] * n_out
        all_lps += lp.tolist()
        prompt = np.concatenate([prompt, out])
        messages.append({"role": "assistant", "content": words(out)})
        if not last:
            tool = ids(n_tool)
            prompt = np.concatenate([prompt, tool])
            messages.append({"role": "tool", "content": words(tool), "tool_call_id": f"c{t}"})
            mask += [0] * n_tool
            all_lps += [0.0] * n_tool
    final_prompt_len = len(prompt) - n_out
    sequences.append({"role": "agent", "trainable": True, "root_id": node_ids[0], "node_ids": node_ids,
                      "n_turns": n_turns,
                      "prompt_len": sys_len, "n_trainable": int(sum(mask)), "turn_lengths": lengths,
                      "input_ids": prompt.tolist(), "loss_mask": mask, "logprobs": all_lps, "findings": []})
    assert final_prompt_len + n_out == len(mask)

    tests = ([{"input": f"{k}\n", "output": f"{k * 2}\n"} for k in range(4)] if with_tests else [])
    passed = int(rng.integers(0, len(tests) + 1)) if tests else None
    reward = (passed / len(tests)) if tests else None
    env = "coding" if with_tests else "crafter"
    task = TaskInfo(env=env, task_id=f"task-{task_index}", task_index=task_index, title=f"Double {task_index}",
                    instruction="Read n, print 2n.\n\nExample: 1 -> 2", source="builtin", dataset_seed=0,
                    rollout_seed=seed, n_prompts=64, config={"harness": "builtin", "model": model, "tokenizer": "builtin"},
                    held_out_tests=tests, visible_tests="1 -> 2\n" if with_tests else "")
    task_id = task.task_id
    extra: dict[str, Any] = {}
    if not with_tests:  # a Crafter-like environment reports its own outcome figures
        extra["env_metrics"] = {"achievements_unlocked": int(rng.integers(0, 23)),
                                "crafter_return": round(float(rng.normal(2.0, 1.0)), 2), "env_steps": 10 * n_turns}
    summary = summary_document(
        rollout_id=rid, created_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), task=task, model=model,
        harness="builtin",
        counts=RolloutCounts(captured_calls=len(calls), agent_turns=n_turns, trained_turns=n_turns,
                             tool_calls_by_name={"run": n_turns - 1}, trainable=True,
                             trainable_tokens=int(sum(mask)), findings_count=0),
        score=Score(env_reward=reward, reward_after_penalties=reward, held_out_tests=len(tests),
                    held_out_passed=passed, leakage_hits=[]),
        timed_out=False, stop_reason="final_answer", capture_level="tokens", timings={"total": 1.0}, errors=[],
        extra=extra)
    n_trainable = sum(x["n_trainable"] for x in sequences if x["trainable"])
    stats = {"n_turns": len(calls), "n_roots": 1 + int(with_aux), "n_forks": int(with_retry),
             "n_discarded": int(with_retry), "n_leaves": 1 + int(with_aux) + int(with_retry), "max_depth": n_turns,
             "mode": "tokens", "n_sequences": len(sequences), "n_trainable_sequences": 1,
             "n_trainable_tokens": n_trainable}
    rollout = {"schema_version": 1, "session_id": session, "metadata": {"task_id": task_id, "model": model},
               "capture_level": "tokens", "rollout_type": "train", "trainable": True, "stats": stats,
               "calls": graph_calls, "sequences": sequences, "findings": []}
    docs = {
        "summary.json": summary, "task.json": task_document(task), "rollout.json": rollout,
        "trace.json": reseal({"schema_version": 1, "session": session, "calls": calls}),
        "turns.json": {"schema_version": 1, "mask_is_derived": True, "turns": turns},
        "held_out_tests.json": held_out_document(task),
    }
    for name, doc in docs.items():
        (folder / name).write_text(json.dumps(doc), encoding="utf-8")
    (folder / "visible_tests.txt").write_text(task.visible_tests, encoding="utf-8")
    (folder / "samples.md").write_text(f"# rollout {rid}\n\n```\n{words(prompt)}\n```\n", encoding="utf-8")
    return rid


def write_synthetic_dataset(root: str | Path, n_rollouts: int, **kwargs: Any) -> list[Path]:
    """Write `n_rollouts` synthetic artifact folders under `root` (seeds 0..n-1).

    Args:
        root: the parent folder.
        n_rollouts: how many rollouts.
        **kwargs: passed to `write_synthetic_rollout`.

    Returns:
        The artifact folders.
    """
    root = Path(root)
    seed0 = int(kwargs.pop("seed", 0))
    folders = []
    for k in range(n_rollouts):
        folder = root / f"rollout-{seed0 + k:05d}"
        write_synthetic_rollout(folder, seed=seed0 + k, task_index=k % 8, **kwargs)
        folders.append(folder)
    return folders
