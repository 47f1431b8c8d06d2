"""What a capture of the coding environment is asked to do (`CaptureConfig`: the `capture` flags)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rollout_dataset.rewards.penalties import PenaltyRules
from rollout_dataset.proxy.redact import redact_url

__all__ = ["CaptureConfig", "UPSTREAM_NOT_RECORDED"]


#: what task.json's `config.base_url` reads when the upstream host is not recorded.
UPSTREAM_NOT_RECORDED = "not recorded (--record-upstream-host)"


@dataclass
class CaptureConfig:
    """Settings of one capture (the `rollout-dataset capture` flags).

    Args:
        out_dir: where the artifacts go (created; existing artifact files are overwritten).
        base_url: an OpenAI-compatible server (ends in ``/v1``); None starts the local backend.
            Userinfo (``user:pass@`` → Basic, ``token@`` → Bearer) and query parameters are sent
            by the proxy to the server only; the URL is written and printed redacted.
        model: the model name; default ``local`` for the local backend, else the server's first model.
        task_index: which task of the selected list.
        seed: dataset seed: decides which task each index points at.
        rollout_seed: seed of the rollout (request ``seed``); None means `seed`.
        n_prompts: size of the selected task list.
        tasks: ``builtin``, a JSONL/parquet path, or ``hf:ORG/NAME[:SPLIT]``.
        harness: ``builtin``, ``cmd:COMMAND``, ``mini-swe-agent`` or ``opencode``.
        timeout_s: wall-time budget of the harness.
        api_key: the real key of `base_url` (default `OPENAI_API_KEY`): the proxy sends it upstream;
            the harness only gets a per-rollout dummy key. Never written anywhere.
        policy: the local backend's policy (``oracle``, ``script``, ``echo``).
        script: the script file of the ``script`` policy.
        tokenizer: tokenizer for re-rendering checks and samples (default ``builtin`` for the local
            backend; else `model` when it loads offline, or none).
        max_turns: turn budget of the built-in harness.
        max_tokens: completion cap per call of the built-in harness.
        temperature: sampling temperature of the built-in harness.
        rollout_id: the rollout's id (uuid4 hex); None draws one.
        penalties: the penalty rules.
        push_repo: build the artifact folder into a dataset and push it to this Hub repo
            (``org/name``); None pushes nothing (the library never reads ``PUSH_TO_DATASET``).
        push_private: create a new `push_repo` private (None: the Hub's default).
        keep_workdir: copy the agent's final working directory to ``<out_dir>/workdir`` (debugging).
        served_model_name: the local backend's model name.
        max_tokens_cap: the proxy lowers every call's output limit to at most this (None: no cap).
        fit_context: the proxy lowers output limits to what is left of the model's context, and
            ends the rollout with stop reason ``context_exhausted`` when a prompt leaves no room
            (`rollout_dataset.proxy.context_fit`).
        local_max_model_len: the context length of the local backend (when no `base_url`).
        more_upstreams: more model servers serving the model of `base_url` (``--upstream`` repeated): the
            rollout's proxy places it on the least loaded healthy one (`rollout_dataset.proxy.upstream_pool`).
        trust_env: the proxy and the capture reach `base_url` honouring HTTP(S)_PROXY / ALL_PROXY / NO_PROXY and
            SSL_CERT_FILE / SSL_CERT_DIR as httpx does (`rollout_dataset.proxy.trust_env`); False ignores them
            (`--no-trust-env`). The local backend is always reached directly.
        hide_paths: more paths masked inside the agent's sandbox (see `rollout_dataset.recipes.coding.hiding`);
            the allow-list root holds none of them anyway.
        sandbox_ro_paths: host files or folders an external harness needs read-only in its sandbox
            (`--sandbox-ro`), besides the runtime and the program its command runs (by absolute path);
            one that holds the task data or `out_dir` is refused.
        unsafe_sandbox: run the agent's code and the verifier even where the allow-list sandbox
            cannot be built (`--unsafe-sandbox`); summary.json then records ``isolation: "unsafe"``.
        record_upstream_host: record `base_url` in task.json; by default it is replaced by
            `UPSTREAM_NOT_RECORDED` (internal host names do not leak into a published dataset).
        on_policy: the proxy's on-policy mode (multi-turn prompts built from the sampled ids).
        harbor_env: the environment a Harbor task runs in under terminus-2 (`--harbor-env`): ``auto``,
            ``bwrap`` or a Harbor environment type (`rollout_dataset.harbor.environments`).
    """

    #: the environment this configuration belongs to (`rollout_dataset.envs.registry`).
    env_name: ClassVar[str] = "coding"

    out_dir: str | Path = "trace_artifact"
    base_url: str | None = None
    model: str | None = None
    task_index: int = 0
    seed: int = 0
    rollout_seed: int | None = None
    n_prompts: int = 64
    tasks: str = "builtin"
    harness: str = "builtin"
    timeout_s: float = 900.0
    api_key: str | None = None
    policy: str = "oracle"
    script: str | Path | None = None
    tokenizer: str | None = None
    max_turns: int = 20
    max_tokens: int = 2048
    temperature: float = 1.0
    rollout_id: str | None = None
    penalties: PenaltyRules = field(default_factory=PenaltyRules)
    push_repo: str | None = None
    push_private: bool | None = None
    keep_workdir: bool = False
    served_model_name: str = "local"
    hide_paths: tuple[str | Path, ...] = ()
    on_policy: bool = False
    max_tokens_cap: int | None = None
    fit_context: bool = True
    local_max_model_len: int = 131072
    trust_env: bool = True
    more_upstreams: tuple[str, ...] = ()
    sandbox_ro_paths: tuple[str | Path, ...] = ()
    unsafe_sandbox: bool = False
    record_upstream_host: bool = False
    harbor_env: str = "auto"

    def __post_init__(self) -> None:
        from rollout_dataset.harbor.environments import HARBOR_ENV_CHOICES

        if self.harbor_env not in HARBOR_ENV_CHOICES:
            raise ValueError(f"harbor_env must be auto, bwrap or one of Harbor's environment types "
                             f"({', '.join(HARBOR_ENV_CHOICES[2:])}), got {self.harbor_env!r}")
        self.hide_paths = tuple(self.hide_paths)
        self.sandbox_ro_paths = tuple(self.sandbox_ro_paths)
        if self.max_tokens_cap is not None and self.max_tokens_cap < 1:
            raise ValueError(f"max_tokens_cap must be >= 1, got {self.max_tokens_cap}")
        if self.local_max_model_len < 2:
            raise ValueError(f"local_max_model_len must be >= 2, got {self.local_max_model_len}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.n_prompts < 1:
            raise ValueError(f"n_prompts must be >= 1, got {self.n_prompts}")
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.rollout_id is not None and (len(self.rollout_id) != 32 or
                                            any(c not in "0123456789abcdef" for c in self.rollout_id)):
            raise ValueError(f"rollout_id must be 32 lowercase hex characters (uuid4 hex), got {self.rollout_id!r}")

    @property
    def recorded_base_url(self) -> str | None:
        """`base_url` as task.json records it: None for the local backend, `UPSTREAM_NOT_RECORDED`
        unless `record_upstream_host`, else the URL redacted (`proxy.redact.redact_url`)."""
        if self.base_url is None:
            return None
        return redact_url(self.base_url) if self.record_upstream_host else UPSTREAM_NOT_RECORDED

    @property
    def effective_rollout_seed(self) -> int:
        """The rollout seed (`rollout_seed`, else `seed`)."""
        return self.seed if self.rollout_seed is None else self.rollout_seed

    @property
    def upstream_api_key(self) -> str | None:
        """The real key the proxy sends to `base_url`: `api_key`, else `OPENAI_API_KEY`, else None.

        None as well for the local backend (no `base_url`): it needs no key.
        """
        if not self.base_url:
            return None
        return self.api_key or os.environ.get("OPENAI_API_KEY") or None

    def public_dict(self) -> dict[str, Any]:
        """The settings as task.json records them (no credentials).

        Returns:
            A JSON-ready dict without the API key.
        """
        return {
            "base_url": self.recorded_base_url, "model": self.model, "tasks": self.tasks, "harness": self.harness,
            "timeout_s": self.timeout_s, "policy": self.policy if self.base_url is None else None,
            "script": str(self.script) if self.script else None, "tokenizer": self.tokenizer,
            "max_turns": self.max_turns, "max_tokens": self.max_tokens, "temperature": self.temperature,
            "on_policy": self.on_policy,
            "max_tokens_cap": self.max_tokens_cap, "fit_context": self.fit_context,
            "penalties": {"tool_call_budget": self.penalties.tool_call_budget,
                          "per_extra_tool_call": self.penalties.per_extra_tool_call,
                          "max_tool_call_penalty": self.penalties.max_tool_call_penalty,
                          "never_ran_code": self.penalties.never_ran_code},
        }
