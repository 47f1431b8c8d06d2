"""Keep secrets out of artifacts: collect the values to hide, redact them from text before writing.

Secrets are the API key given to the capture, the harness's per-rollout dummy key, credentials in
the upstream URL (`rollout_dataset.proxy.upstream.UpstreamTarget.secrets`), and the values of
environment variables whose names are credential names by THE rule
(`rollout_dataset.proxy.redact.is_credential_name`: ``HF_TOKEN``, ``OPENAI_API_KEY``,
``DB_PASSWORD``, ... but not ``MAX_TOKENS``). Text patterns that look like credentials
(``Bearer ...``, ``sk-...``, ``hf_...``) are redacted too.
"""

from __future__ import annotations

import json
import os
import re
import secrets as _random
from typing import Iterable, Mapping

from rollout_dataset.proxy.redact import REDACTED, is_credential_name

__all__ = ["REDACTED", "DUMMY_KEY_PREFIX", "collect_secrets", "new_dummy_key", "redact_text"]

#: how every per-rollout dummy key starts (``rollout-dummy-`` + 32 hex)
DUMMY_KEY_PREFIX = "rollout-dummy-"
_PLACEHOLDER_KEYS = {"", "empty", "none", "null", "dummy", "sk-no-key", "no-key", "local", "test", "true", "false"}
_PATTERNS = (
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=\-]{8,}"),
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{16,}"),
)


def collect_secrets(explicit: Iterable[str | None] = (), environ: Mapping[str, str] | None = None) -> list[str]:
    """The secret values to keep out of every artifact.

    Args:
        explicit: values known to be secret (the API key); placeholders like ``EMPTY`` are ignored.
        environ: the environment to scan (default `os.environ`).

    Returns:
        Distinct values, longest first (so a secret containing another is redacted whole).
    """
    environ = os.environ if environ is None else environ
    values = {v for v in explicit if v and v.strip().lower() not in _PLACEHOLDER_KEYS and len(v) >= 4}
    for name, value in environ.items():
        if is_credential_name(name) and value and len(value) >= 8 \
                and value.strip().lower() not in _PLACEHOLDER_KEYS:
            values.add(value)
    return sorted(values, key=len, reverse=True)


def new_dummy_key() -> str:
    """A fresh per-rollout key for the harness: it authenticates to nothing but the local proxy.

    Returns:
        ``rollout-dummy-`` followed by 32 random hex digits.
    """
    return DUMMY_KEY_PREFIX + _random.token_hex(16)


def redact_text(text: str, secrets: Iterable[str]) -> tuple[str, int]:
    """Replace secret values and credential-looking patterns in text.

    URLs in model output are left as they are (redacting every ``?key=`` a model writes would
    change the recorded text); the credentials of the capture's own upstream URL are known
    values and are passed in `secrets`.

    Secrets are matched raw and JSON-escaped (as they would appear inside a JSON string).

    Args:
        text: the text to clean.
        secrets: values from `collect_secrets`.

    Returns:
        ``(clean_text, replacements)``.
    """
    count = 0
    for secret in secrets:
        for form in {secret, json.dumps(secret)[1:-1]}:
            if form and form in text:
                count += text.count(form)
                text = text.replace(form, REDACTED)
    for pattern in _PATTERNS:
        text, n = pattern.subn(REDACTED, text)
        count += n
    return text, count
