"""Harbor's ``podman`` environment with the recording proxy's port inside the container, and nothing else
when the task asks for no network (`ProxiedPodmanEnvironment`, ``--env`` `PROXIED_PODMAN_SPEC`).

An installed agent (opencode, Codex, Claude Code, mini-swe-agent, ...) runs *inside* the task's
container and calls the model from there. The container must reach the proxy, and, when the task
says ``allow_internet = false`` / ``network_mode = "no-network"``, nothing else. Harbor's own
``podman`` environment enforces no-network through an egress-control sidecar image pulled from a
registry (``gogost/gost``); where registries cannot be reached it cannot, and Harbor refuses the task.
This subclass enforces it with the kernel instead:

- the main container runs with ``network_mode: none`` (a network namespace holding only loopback: no
  route to the host, its gateway, other containers or the internet);
- the proxy's port crosses into that namespace on the host's side: once the container runs, a host
  process ``nsenter --net=/proc/PID/ns/net socat TCP-LISTEN:127.0.0.1:PORT,fork UNIX-CONNECT:SOCKET``
  listens on the container's own loopback and relays each connection to `proxy_socket`, a Unix socket
  the capture relays to the proxy (`rollout_dataset.sandbox.forward.HostForwarder`). So the agent's
  base URL is the proxy's session URL, unchanged (``http://127.0.0.1:PORT/sessions/ID/v1``). The relay
  runs on the host, outside the container's PID and mount namespaces: nothing inside can see, signal
  or replace it; it dies with Harbor (``setpriv --pdeathsig KILL``) and is stopped with the environment;
- a network policy Harbor hands over for the agent (``allowlist`` of the inference host it derived
  from the base URL) is accepted when every host is loopback, which the relay is; any other host is
  refused (this environment gives the proxy and nothing else);
- ``exec`` gets no terminal (``podman-compose exec -T``): podman-compose 1.x allocates one by default, and
  every output line then ends in ``\r\n`` (Codex's own uid lookup fails on it);
- a task whose network is ``public`` keeps Podman's default bridge network (as Harbor runs it), with
  the same relay on its loopback.

It runs inside Harbor's venv, so it imports only Harbor and the standard library. Root (or Podman's
rootless ``podman unshare``) is needed to enter the container's network namespace: this machine runs
Podman as root.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.environments.docker.docker import _sanitize_docker_compose_project_name
from harbor.environments.podman import PodmanEnvironment, PodmanOptions
from harbor.models.environment_type import EnvironmentType
from harbor.models.task.config import NetworkMode, NetworkPolicy

__all__ = ["ProxiedPodmanEnvironment", "ProxiedPodmanOptions", "LOOPBACK_HOSTS"]

#: the hosts an allow-list may name here: the container's own loopback, where the proxy's port is relayed
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
_READY_WAIT_S = 10.0
_LOG_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts")


class ProxiedPodmanOptions(PodmanOptions):
    """The podman environment's kwargs, plus where the proxy's port comes from.

    Args:
        proxy_socket: the host's Unix socket relayed to the proxy (``--ek proxy_socket=PATH``); empty (with
            `proxy_port` 0): no relay, for an agent whose model calls come from the host (terminus-2, oracle).
        proxy_port: the port the relay listens on at the container's ``127.0.0.1`` (the proxy's own port,
            so the session URL is the same inside).
    """

    proxy_socket: str = ""
    proxy_port: int = 0


class ProxiedPodmanEnvironment(PodmanEnvironment):
    """`PodmanEnvironment` whose main container reaches the recording proxy, and only it when the task asks
    for no network (see the module docstring)."""

    options_model = ProxiedPodmanOptions
    options: ProxiedPodmanOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.options = ProxiedPodmanOptions.model_validate(
            {k: kwargs.pop(k) for k in list(kwargs) if k in ProxiedPodmanOptions.model_fields})
        relayed = bool(self.options.proxy_socket) or self.options.proxy_port != 0
        if relayed and (not self.options.proxy_socket or not 0 < self.options.proxy_port < 65536):
            raise ValueError("the proxied podman environment needs both --ek proxy_socket=PATH and --ek "
                             "proxy_port=PORT (1-65535), or neither (no relay: a no-network task gets loopback only)")
        self._relay: subprocess.Popen[bytes] | None = None
        self._overlay_dir = tempfile.TemporaryDirectory(prefix="rollout-podman-net-")
        super().__init__(*args, **kwargs)
        self._isolated = self.network_policy.network_mode != NetworkMode.PUBLIC
        overlay = {"services": {"main": {"network_mode": "none"}}} if self._isolated else {"services": {"main": {}}}
        self._overlay_path = Path(self._overlay_dir.name) / "docker-compose-proxied-network.json"
        self._overlay_path.write_text(json.dumps(overlay), encoding="utf-8")

    @staticmethod
    def type() -> EnvironmentType:
        return EnvironmentType.PODMAN

    @classmethod
    def _egress_control_kernel_support(cls) -> bool:
        return False  # no sidecar: the network is cut by the kernel (network_mode none), not filtered

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return super().capabilities.model_copy(update={
            "disable_internet": True, "network_allowlist": True, "network_allowlist_hostnames": True,
            "network_allowlist_ipv4_addresses": True, "network_allowlist_ipv6_addresses": True,
            "dynamic_network_policy": False, "stream": False})

    def validate_network_policy_support(self, network_policy: NetworkPolicy | None = None) -> None:
        policy = network_policy or self.network_policy
        if policy.network_mode == NetworkMode.ALLOWLIST:
            others = [h for h in policy.allowed_hosts if h not in LOOPBACK_HOSTS]
            if others:
                raise ValueError(f"network allowlist {others!r}: the proxied podman environment gives the container "
                                 "the recording proxy's port on its loopback and no other host")
            return
        super().validate_network_policy_support(policy)

    async def _apply_network_policy(self, network_policy: NetworkPolicy) -> None:
        isolated = network_policy.network_mode != NetworkMode.PUBLIC
        if isolated != self._isolated:
            raise ValueError("the proxied podman environment's network is fixed when it starts "
                             f"({'loopback only' if self._isolated else 'public'}); it cannot become "
                             f"{network_policy.network_mode.value}")

    @property
    def _docker_compose_paths(self) -> list[Path]:
        return [*super()._docker_compose_paths, self._overlay_path]

    async def _run_docker_compose_command(self, command: list[str], *args: Any, **kwargs: Any) -> Any:
        # podman-compose 1.x gives `exec` a terminal unless told not to: every line of a command's output then
        # ends in \r\n, and an agent parsing it (Codex reads its uid from `id -u`'s line) finds nothing
        if command[:1] == ["exec"] and "-T" not in command:
            command = ["exec", "-T", *command[1:]]
        return await super()._run_docker_compose_command(command, *args, **kwargs)

    def _main_pid(self) -> int:
        """The host PID of the main container's first process."""
        project = _sanitize_docker_compose_project_name(self.session_id)
        listed = subprocess.run(
            [*type(self)._engine_cmd("ps", "-q", "--filter", f"label=com.docker.compose.project={project}",
                                     "--filter", "label=com.docker.compose.service=main")],
            capture_output=True, text=True, timeout=300)
        ids = listed.stdout.split()
        if listed.returncode != 0 or len(ids) != 1:
            raise RuntimeError(f"cannot find the main container of {project!r} ({listed.stderr.strip() or ids})")
        pid = subprocess.run([*type(self)._engine_cmd("inspect", "-f", "{{.State.Pid}}", ids[0])],
                             capture_output=True, text=True, timeout=300).stdout.strip()
        if not pid.isdigit() or int(pid) <= 0:
            raise RuntimeError(f"the main container {ids[0]} has no running process")
        return int(pid)

    def _start_relay(self) -> None:
        """The proxy's port on the container's loopback (see the module docstring); none when no proxy was given."""
        if not self.options.proxy_socket:
            return
        pid, port = self._main_pid(), self.options.proxy_port
        argv = ["setpriv", "--pdeathsig", "KILL", "nsenter", f"--net=/proc/{pid}/ns/net", "--",
                "socat", f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr",
                f"UNIX-CONNECT:{self.options.proxy_socket}"]
        self._relay = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, start_new_session=True)
        listening = f"0100007F:{port:04X} 00000000:0000 0A"
        deadline = time.monotonic() + _READY_WAIT_S
        while time.monotonic() < deadline and self._relay.poll() is None:
            try:
                if listening in Path(f"/proc/{pid}/net/tcp").read_text():
                    self.logger.debug("proxy relay listening on 127.0.0.1:%d in container pid %d", port, pid)
                    return
            except OSError:
                break
            time.sleep(0.05)
        err = self._relay.stderr.read().decode(errors="replace")[-400:] if self._relay.poll() is not None and \
            self._relay.stderr else "not listening in time"
        self._stop_relay()
        raise RuntimeError(f"the proxy relay into the container did not start: {err.strip()}")

    def _stop_relay(self) -> None:
        relay, self._relay = self._relay, None
        if relay is None:
            return
        try:
            os.killpg(relay.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        relay.wait(timeout=10)
        if relay.stderr:
            relay.stderr.close()

    async def start(self, force_build: bool) -> None:
        await super().start(force_build)
        # Harbor's log folders: podman-compose has no `cp`, so nothing else makes them when they are not mounted
        await self.exec(f"mkdir -p {' '.join(_LOG_DIRS)} && chmod 777 {' '.join(_LOG_DIRS)}", user="root")
        self._start_relay()

    async def stop(self, delete: bool) -> None:
        self._stop_relay()
        try:
            await super().stop(delete)
        finally:
            self._overlay_dir.cleanup()
