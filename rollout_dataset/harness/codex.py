"""The Codex CLI preset (`--harness codex`): OpenAI's Codex (npm `@openai/codex`, a native binary
shipped inside npm packages) run headless with `codex exec`, over the Responses API.

Codex reads its configuration from `$CODEX_HOME/config.toml`; the preset writes one into the
harness's isolated HOME before starting it (from the `ROLLOUT_CODEX_CONFIG` variable), with:

- a model provider ``rollout`` whose `base_url` is the proxy's session URL, `wire_api = "responses"`
  and `env_key = "OPENAI_API_KEY"` (the dummy key the harness gets; nothing is written to disk);
- `approval_policy = "never"` and `sandbox_mode = "danger-full-access"`: the capture's own sandbox
  (`rollout_dataset.sandbox`) isolates the run; Codex's nested sandbox could not start inside it;
- no update check, no analytics, no feedback upload (the run is offline);
- when the capture knows the model's context (`--fit-context`), `model_context_window` and
  `model_max_output_tokens`, so Codex's own compaction starts before the context is full.

Codex's shell tool is `exec_command` (``{"cmd": "..."}``); the local backend's `script` policy can
drive it for offline tests. Observed with codex-cli 0.171.0: it streams every call, sends
`store: false`, `include: ["reasoning.encrypted_content"]` and a `session-id` header.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names for annotations only; imported lazily where used
    from rollout_dataset.harness.preset_base import HarnessPreset

import shlex

__all__ = ["CODEX_VERSION", "find_codex", "codex_config", "codex_preset"]

#: the Codex CLI version the Makefile installs and the tests drive
CODEX_VERSION = "0.171.0"


def find_codex() -> str | None:
    """Locate the codex binary: `CODEX_BIN`, the repo's `.npm-tools`, or PATH.

    Returns:
        The path, or None when Codex is not installed (`make npm-tools` installs it).
    """
    from rollout_dataset.harness.preset_base import find_npm_tool

    return find_npm_tool("codex", "CODEX_BIN")


def codex_config(context_tokens: int | None = None, output_tokens: int | None = None) -> str:
    """Codex's config.toml, with the `{base_url}` placeholder for the proxy's session URL.

    Args:
        context_tokens: the model's context length (None: Codex's fallback metadata).
        output_tokens: the output limit (default a quarter of the context).

    Returns:
        The TOML text.
    """
    lines = [
        'model_provider = "rollout"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        "check_for_update_on_startup = false",
        "",
    ]
    if context_tokens:
        quarter = max(1, int(context_tokens) // 4)
        output = min(int(output_tokens), quarter) if output_tokens else quarter
        lines[-1:-1] = [f"model_context_window = {int(context_tokens)}", f"model_max_output_tokens = {output}"]
    lines += [
        "[analytics]", "enabled = false", "",
        "[feedback]", "enabled = false", "",
        "[model_providers.rollout]",
        'name = "rollout proxy"',
        'base_url = "{base_url}"',
        'env_key = "OPENAI_API_KEY"',
        'wire_api = "responses"',
        "",
    ]
    return "\n".join(lines)


def codex_preset(codex_bin: str | None = None, *, context_tokens: int | None = None,
                 output_tokens: int | None = None) -> HarnessPreset:
    """The Codex preset.

    Args:
        codex_bin: the codex executable (default: `find_codex()` or `codex`).
        context_tokens: the model's context length, written into Codex's config.
        output_tokens: the output limit written into Codex's config.

    Returns:
        The `HarnessPreset`.
    """
    from rollout_dataset.harness.preset_base import HarnessPreset, tool_folder

    binary = codex_bin or find_codex() or "codex"
    command = ('mkdir -p "$HOME/.codex" && printf "%s" "$ROLLOUT_CODEX_CONFIG" > "$HOME/.codex/config.toml" && '
               f'CODEX_HOME="$HOME/.codex" {shlex.quote(binary)} exec --skip-git-repo-check --color never -m {{model}} '
               '"$(cat {task_file})"')
    env = {"ROLLOUT_CODEX_CONFIG": codex_config(context_tokens, output_tokens)}
    folder = tool_folder(binary)  # the npm prefix holding codex's native binary, read-only in the sandbox
    return HarnessPreset("codex", command, env, (folder,) if folder else ())
