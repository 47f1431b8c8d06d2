"""Name what went wrong when a Harbor task's container could not be built or run (Podman or Docker output).

Harbor's docker/podman environments raise a ``RuntimeError`` that carries the compose frontend's whole
output ("Docker compose command failed ... Stdout: ..."): hundreds of lines where the user needs one.
`describe_container_failure(text)` finds, in that text or in Harbor's log:

- the Dockerfile step that failed, with the last lines it printed (``podman build``'s
  ``Error: building at STEP "..."`` and the ``STEP n/m:`` line before it; BuildKit's
  ``process "..." did not complete successfully``);
- a base image that cannot be pulled: the registry is unreachable (this host resolves no registry:
  the message points at the stand-ins, `STANDIN_TARGET`) or the image does not exist;
- a container that died under a running trial (killed, OOM, its runtime gone);
- Harbor refusing ``network_mode = "no-network"`` because its egress-control images cannot be pulled;
- podman's network backend failing to find its helpers (a PATH without /usr/sbin).

Standard library only (and `standin_images`), like the rest of the Harbor glue.
"""

from __future__ import annotations

import re

from rollout_dataset.harbor.standin_images import STANDIN_TARGET, standin_for

__all__ = ["LAST_LINES", "describe_container_failure", "failed_build_step", "unpullable_image"]

#: how many lines of a failed step's output a description keeps
LAST_LINES = 5
_LINE_CHARS = 200
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_STEP = re.compile(r"^STEP (\d+)/(\d+): (.*)$")
_PODMAN_STEP_ERROR = re.compile(r'^Error: building at STEP "(.*)": (.*)$')
_BUILDKIT_ERROR = re.compile(r'process "(.*)" did not complete successfully: (.*?)(?:$|\.\s)')
_PULL_SOURCE = re.compile(r"initializing source docker://([^:\s]+(?::[^:\s]+)?(?:@\S+)?): (.*)$")
#: Podman with no search registries configured (a host that reaches none): a short image name cannot resolve
_SHORT_NAME = re.compile(r'short-name "([^"]+)" did not resolve to an alias and no unqualified-search registries')
_UNREACHABLE = re.compile(r"no such host|dial tcp|i/o timeout|connection refused|network is unreachable|"
                          r"TLS handshake timeout|server misbehaving", re.IGNORECASE)
_NOT_FOUND = re.compile(r"manifest unknown|not found|name unknown|requested access to the resource is denied|"
                        r"pull access denied|unauthorized", re.IGNORECASE)
_CONTAINER_GONE = re.compile(r"(?:no container with name or ID|container \S+ is not running|cannot exec in a stopped container|"
                             r"open /proc/\d+/ns/\w+: no such file or directory|"
                             r"can only create exec sessions on running containers|container state improper|"
                             r"OOMKilled|exited with code 137)[^\n]*", re.IGNORECASE)
_NO_NETWORK = "network_mode='no-network' is not supported by"
_NETAVARK_MISSING = "netavark: No such file or directory"


def _lines(text: str) -> list[str]:
    """The text's lines without ANSI colours; Harbor's one-line ``Stdout: ...`` keeps its ``\\n`` escapes."""
    text = _ANSI.sub("", text).replace("\\n", "\n")
    return [line.rstrip() for line in text.splitlines()]


def _short(line: str) -> str:
    line = line.strip()
    return line if len(line) <= _LINE_CHARS else line[:_LINE_CHARS - 1] + "…"


def failed_build_step(text: str) -> str | None:
    """The Dockerfile step an image build failed at, with its last lines of output.

    Args:
        text: a build's output (or an error message that embeds it).

    Returns:
        ``image build failed at step N/M `STEP` (REASON); last output: LINE | LINE``, or None when the
        text shows no failed step.
    """
    lines = _lines(text)
    for index in range(len(lines) - 1, -1, -1):
        podman = _PODMAN_STEP_ERROR.match(lines[index].strip())
        buildkit = None if podman else _BUILDKIT_ERROR.search(lines[index])
        if not podman and not buildkit:
            continue
        step, reason = (podman or buildkit).groups()  # type: ignore[union-attr]
        number, output = "", []  # type: tuple[str, list[str]]
        for back in range(index - 1, -1, -1):
            found = _STEP.match(lines[back].strip())
            if found:
                number = f" {found.group(1)}/{found.group(2)}"
                step = found.group(3)
                break
            if lines[back].strip() and not lines[back].lstrip().startswith("-->"):
                output.insert(0, _short(lines[back]))
        tail = output[-LAST_LINES:]
        last = f"; last output: {' | '.join(tail)}" if tail else ""
        return f"image build failed at step{number} `{_short(step)}` ({_short(reason)}){last}"
    return None


def unpullable_image(text: str) -> str | None:
    """A base image that could not be pulled, and what to do about it.

    Args:
        text: a build's or a run's output.

    Returns:
        One sentence naming the image and why (registry unreachable: build the stand-ins; image not
        found), or None.
    """
    for line in reversed(_lines(text)):
        short = _SHORT_NAME.search(line)
        found = short or _PULL_SOURCE.search(line)
        if not found:
            continue
        image, detail = found.group(1), "" if short else found.group(2)
        if short or _UNREACHABLE.search(detail):
            standin = standin_for(image)
            hint = (f"`{STANDIN_TARGET}` builds a local stand-in tagged {image} ({standin})" if standin else
                    "no stand-in provides it (`python -m rollout_dataset.harbor.standin_images --list` names those "
                    "that exist): load it with `podman load` or change the task's FROM line")
            return f"base image {image} cannot be pulled: its registry is unreachable from this host; {hint}"
        if _NOT_FOUND.search(detail):
            return f"base image {image} does not exist in its registry (or needs a login): {_short(detail)}"
        return f"base image {image} cannot be pulled: {_short(detail)}"
    return None


def describe_container_failure(text: str) -> str | None:
    """One line naming why a task's container could not be built or kept running.

    Args:
        text: Harbor's exception message and/or its output log.

    Returns:
        The description, or None when the text shows none of the known failures.
    """
    if not text:
        return None
    for describe in (unpullable_image, failed_build_step):
        found = describe(text)
        if found:
            return found
    if _NO_NETWORK in text:
        return ("Harbor's podman/docker environment refuses network_mode='no-network' here: its egress-control "
                "sidecar needs images (alpine, gost) from a registry this host cannot reach; run it with "
                "--harbor-env podman (network none, docs/harbor.md) or allow it network")
    if _NETAVARK_MISSING in text:
        return ("podman's network backend could not run a helper (netavark: No such file or directory): iptables "
                "and nft live in /usr/sbin, which must be on the PATH Harbor runs with")
    gone = _CONTAINER_GONE.search(_ANSI.sub("", text))
    if gone:
        return f"the task's container stopped under the running trial: {_short(gone.group(0))}"
    return None
