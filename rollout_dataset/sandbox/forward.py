"""One loopback port from the host into a sandbox that has no network (socat on both ends).

An external harness must reach the recording proxy at ``http://127.0.0.1:PORT``, yet its sandbox has
its own network namespace (only loopback, nothing of the host). Rather than giving it the host
network (every loopback service, the internet), exactly one port crosses, through a Unix socket:

    sandbox: socat TCP-LISTEN:127.0.0.1:PORT  -->  /run/rollout-forward.sock (bind-mounted file)
    host:    socat UNIX-LISTEN:<private dir>/forward.sock  -->  TCP 127.0.0.1:PORT (the proxy)

`HostForwarder` runs the host end; `inner_wrapper()` is the shell prefix that starts the sandbox end
and waits until it listens before exec'ing the harness.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["HostForwarder", "SOCKET_IN_SANDBOX", "inner_wrapper", "loopback_port"]

log = logging.getLogger(__name__)

#: where the forwarding socket appears inside the sandbox
SOCKET_IN_SANDBOX = "/run/rollout-forward.sock"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def loopback_port(url: str) -> int | None:
    """The port of a loopback URL (the proxy's), None for any other URL.

    Args:
        url: e.g. ``http://127.0.0.1:8123/s/abc/v1``.

    Returns:
        The port, or None when the host is not loopback or the URL has no port.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.hostname not in _LOOPBACK:
        return None
    return port or (443 if parts.scheme == "https" else 80)


def inner_wrapper(port: int) -> list[str]:
    """The command prefix that listens on 127.0.0.1:`port` inside the sandbox, then runs the command.

    It waits (at most ~5 s) until socat listens, and not at all once socat has died (a port below
    1024 cannot be bound by the unprivileged sandbox user: the harness then finds nothing there).

    Args:
        port: the loopback port the harness connects to.

    Returns:
        ``["/bin/sh", "-c", SCRIPT, "forward"]``; append the harness's argv.
    """
    hex_port = f"{int(port):04X}"
    script = (f"socat TCP-LISTEN:{int(port)},bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:{SOCKET_IN_SANDBOX} "
              f"2>/dev/null &\n"
              "p=$!; i=0\n"
              f"while ! grep -q ':{hex_port} 00000000:0000 0A' /proc/net/tcp && kill -0 $p 2>/dev/null "
              "&& [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done\n"
              'exec "$@"\n')
    return ["/bin/sh", "-c", script, "forward"]


class HostForwarder:
    """The host end: a Unix socket in a private folder, relayed to ``host:port`` by socat.

    Args:
        port: the TCP port on the host's loopback to relay to.
        host: the address to relay to.

    Raises:
        FileNotFoundError: socat is not installed.
        RuntimeError: the socket did not appear within 5 s.
    """

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        socat = shutil.which("socat")
        if not socat:
            raise FileNotFoundError("socat is not installed (Debian package `socat`; `make test` installs it): "
                                    "it carries the proxy port into the sandbox of an external harness")
        self.dir = Path(tempfile.mkdtemp(prefix="rd-forward-"))
        os.chmod(self.dir, 0o755)
        self.socket_path = self.dir / "forward.sock"
        target = f"TCP:[{host}]:{int(port)}" if ":" in host else f"TCP:{host}:{int(port)}"
        self.proc = subprocess.Popen([socat, f"UNIX-LISTEN:{self.socket_path},fork,mode=0666", target],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        deadline = time.monotonic() + 5.0
        while not self.socket_path.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                stderr = self.proc.stderr  # a pipe (stderr=PIPE above)
                err = stderr.read().decode(errors="replace")[:300] if self.proc.poll() is not None and stderr else ""
                self.close()
                raise RuntimeError(f"socat did not open {self.socket_path}: {err or 'timeout'}")
            time.sleep(0.005)

    def bind_args(self) -> list[str]:
        """bwrap arguments putting the socket at `SOCKET_IN_SANDBOX`."""
        return ["--perms", "0755", "--dir", os.path.dirname(SOCKET_IN_SANDBOX),
                "--bind", str(self.socket_path), SOCKET_IN_SANDBOX]

    def close(self) -> None:
        """Stop socat (and its per-connection children) and delete the socket folder."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.warning("forwarder: socat %d did not exit", self.proc.pid)
        if self.proc.stderr:
            self.proc.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "HostForwarder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
