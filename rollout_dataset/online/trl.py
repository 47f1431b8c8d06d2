"""TRL GRPO's ``rollout_func`` over the proxy's session API: each completion is an unmodified harness run
through the proxy in a session of its own.

    proxy = CaptureProxy(upstream=VLLM_URL, trace_dir="traces", session_api=True, session_api_token=TOKEN)
    proxy.start_in_thread()
    rollouts = SessionRollouts(proxy.base_url, token=TOKEN, model="Qwen/Qwen3-8B", score=my_score)
    trainer = GRPOTrainer(model=..., reward_funcs=[session_reward], rollout_func=rollouts, ...)

For each prompt TRL hands over (its ``RepeatSampler`` already repeats a prompt ``num_generations``
times, so a GRPO group is the sessions of one prompt), `SessionRollouts` names a new session
(``uuid4().hex``), runs the harness command against ``<proxy>/sessions/<id>/v1`` (at most
`concurrency` at once), waits for the session's calls to settle, asks `score` for the reward, posts it,
seals the session, and returns the session's main sequence (`agent_loops.main_sequence`) as TRL wants
it: ``prompt_ids``, ``completion_ids``, ``logprobs`` and ``env_mask`` (1 where the model sampled: TRL
multiplies it into its completion mask, so tool output is never trained on), plus ``session_id`` and
``session_reward`` for the reward functions. A session without a trainable sequence trains on nothing
(``env_mask`` all 0).

Standard library, httpx and `rollout_dataset.session_client` only: it runs in the trainer's venv. The
sealed sessions become a dataset afterwards with `capture.session_artifacts.write_session_artifacts`.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import uuid
from typing import Any, Callable, Sequence

from rollout_dataset.errors import SessionApiError
from rollout_dataset.online.agent_loops import main_sequence, prompt_and_response
from rollout_dataset.session_client import SessionClient

__all__ = ["SessionRollouts", "session_reward", "builtin_agent_command", "prompt_text"]


def builtin_agent_command(python: str | None = None) -> list[str]:
    """The built-in agent as a harness command (`rollout_dataset.online.builtin_agent`).

    Args:
        python: the interpreter that has this package (default: this one).

    Returns:
        The argv template (``{base_url}``, ``{model}``, ``{prompt_file}`` filled in per session).
    """
    return [python or sys.executable, "-m", "rollout_dataset.online.builtin_agent", "--base-url", "{base_url}",
            "--model", "{model}", "--prompt-file", "{prompt_file}"]


def prompt_text(prompt: Any) -> str:
    """A TRL prompt as the harness's task statement: a string as it is, a conversation's last user message.

    Args:
        prompt: a string or a list of chat messages.

    Returns:
        The text.
    """
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        for message in reversed(prompt):
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, str):
                    return content
                if isinstance(content, list):
                    return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return json.dumps(prompt, ensure_ascii=False)


#: ``score(prompt, session_document, harness_output) -> reward | None``: the reward of one session.
Score = Callable[[Any, dict[str, Any], str], "float | None"]


class SessionRollouts:
    """A TRL ``rollout_func``: one proxy session per prompt, run by a harness command, read back from the API.

    Args:
        proxy_url: the proxy's URL (root, ``/v1`` or any session URL).
        token: the session API's token (give one: the harness can reach the proxy's port).
        model: the model name the harness asks for.
        command: the harness's argv, ``{base_url}``, ``{model}``, ``{prompt}`` (the text),
            ``{prompt_file}``, ``{session}``, ``{workdir}`` filled in per session; it runs in that fresh
            working directory (default: `builtin_agent_command`).
        score: the reward of a session (None: no reward posted; TRL's own reward functions score).
        concurrency: harness runs at once.
        harness_timeout: seconds one harness run may take (then it is killed; its session still counts).
        settle_timeout: seconds to wait for a session's calls to settle after its harness exited.
        env: environment variables for the harness (default: this process's).

    Raises:
        ValueError: `concurrency` below 1.
    """

    def __init__(self, proxy_url: str, *, token: str | None = None, model: str = "local",
                 command: Sequence[str] | None = None, score: Score | None = None, concurrency: int = 8,
                 harness_timeout: float = 900.0, settle_timeout: float = 60.0,
                 env: dict[str, str] | None = None) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.client = SessionClient(proxy_url, token, timeout=60.0)
        self.root = self.client.root
        self.model = model
        self.command = list(command or builtin_agent_command())
        self.score = score
        self.concurrency = concurrency
        self.harness_timeout = harness_timeout
        self.settle_timeout = settle_timeout
        self.env = env
        self.sessions: list[str] = []  # every session this rollout_func ran, in order

    def __call__(self, prompts: list[Any], trainer: Any = None) -> dict[str, list[Any]]:
        """Run one session per prompt (TRL calls it with the process's prompts and itself).

        Args:
            prompts: TRL's prompts (strings or conversations), one per completion wanted.
            trainer: the GRPO trainer (unused).

        Returns:
            ``{"prompt_ids", "completion_ids", "logprobs", "env_mask", "session_id", "session_reward"}``,
            a list per key, one entry per prompt.

        Raises:
            RuntimeError: a session has no sequence (its harness made no model call; the harness's
                output is in the message).
        """
        with concurrent.futures.ThreadPoolExecutor(self.concurrency) as pool:
            results = list(pool.map(self.rollout, prompts))
        out: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask",
                                                     "session_id", "session_reward")}
        for result in results:
            for key, value in result.items():
                out[key].append(value)
        return out

    def rollout(self, prompt: Any) -> dict[str, Any]:
        """One session: the harness run, its reward posted, the session sealed, its main sequence.

        Args:
            prompt: one TRL prompt.

        Returns:
            The entry of each key of `__call__`'s answer for this prompt.

        Raises:
            RuntimeError: the session has no sequence.
            SessionApiError: the API refused a read, the reward or the seal.
        """
        session = uuid.uuid4().hex
        self.sessions.append(session)
        output = self._run_harness(session, prompt)
        try:
            document = self.client.wait_settled(session, self.settle_timeout)
        except SessionApiError as exc:
            if exc.code != "unknown_session":
                raise
            document = {}  # no call of the session ever ended
        picked = main_sequence(document) if document else None
        if picked is None:
            raise RuntimeError(f"session {session}: the harness made no model call; its output: {output[-500:]}")
        reward = self.score(prompt, document, output) if self.score is not None else None
        if reward is not None:
            self.client.post_reward(session, float(reward), {"prompt": prompt_text(prompt)[:2000]})
        self.client.seal(session)
        part = prompt_and_response(*picked)
        return {"prompt_ids": part["prompt_ids"], "completion_ids": part["response_ids"],
                "logprobs": part["logprobs"], "env_mask": part["mask"], "session_id": session,
                "session_reward": reward}

    def _run_harness(self, session: str, prompt: Any) -> str:
        """Run the harness command for one session in a fresh working directory (removed after); returns
        its output (stdout, then stderr)."""
        text = prompt_text(prompt)
        with tempfile.TemporaryDirectory(prefix="online-rollout-") as workdir:
            prompt_file = os.path.join(workdir, ".prompt.txt")
            with open(prompt_file, "w", encoding="utf-8") as f:
                f.write(text)
            values = {"base_url": f"{self.root}/sessions/{session}/v1", "model": self.model, "prompt": text,
                      "prompt_file": prompt_file, "session": session, "workdir": workdir}
            argv = [part.format(**values) for part in self.command]
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=self.harness_timeout, cwd=workdir,
                                      env=self.env if self.env is not None else dict(os.environ))
                return done.stdout + done.stderr
            except subprocess.TimeoutExpired as exc:
                return f"harness timed out after {self.harness_timeout}s: {exc}"


def session_reward(completions: list[Any], session_reward: list[float | None] | None = None,
                   **kwargs: Any) -> list[float | None]:
    """A TRL reward function: each completion's session reward, as `SessionRollouts` posted it.

    Args:
        completions: TRL's completions (only their count is used).
        session_reward: the rollout function's ``session_reward`` field, forwarded by TRL.
        **kwargs: TRL's other fields (ignored).

    Returns:
        One reward per completion (None where no reward was posted: TRL then ignores this function
        for it).
    """
    rewards = list(session_reward or [])
    return [rewards[i] if i < len(rewards) else None for i in range(len(completions))]
