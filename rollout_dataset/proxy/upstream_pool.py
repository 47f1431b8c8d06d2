"""Several model servers behind one proxy: which upstream serves a session, and which are healthy.

`proxy --upstream URL` given more than once (library: `CaptureProxy(upstream=[url, ...])`) puts the
upstreams in one `UpstreamPool`. The rules, in order:

1. **Sticky.** A session's calls go to the upstream that served its first call (its prefix cache is
   there) for as long as that upstream is healthy.
2. **New sessions go to the least loaded** healthy upstream: the fewest calls in flight in this
   process; ties go to the upstream ranked first for the session by rendezvous hashing
   (`rendezvous_rank`: sha256 of session id and upstream URL), so sessions spread evenly at rest.
3. **Moved only off an unhealthy upstream, never back.** A session whose upstream is unhealthy moves
   to the healthy upstream ranked first for it by rendezvous hashing (every worker computes the same
   one, whatever its load), and stays there when the old one recovers. The first call served after
   the move names the old upstream and why (the record's ``model_server.moved_from``).
4. **Health.** Every `HEALTH_INTERVAL_S` each process asks every upstream ``GET /v1/models`` (within
   `HEALTH_TIMEOUT_S`, its answer read up to `HEALTH_BODY_CAP` bytes): an answer other than 2xx, a
   timeout or a refused connection marks it unhealthy until a later check succeeds. A call that
   cannot reach its upstream (``upstream_unreachable``) marks it unhealthy at once. With no healthy
   upstream at all, calls go to their sticky (or ranked-first) upstream anyway and fail as it fails:
   named in their records, never held back.

With `--workers N` the workers share no memory: a session's placement is written once to
``<trace-dir>/.proxy-state/upstreams/<session>`` (a hard link of a complete temporary file, so the
first worker to place the session wins and every other reads its choice); a move replaces it (a
rename). Each worker checks health itself, so for a check interval two workers may disagree about an
upstream; both then move a session to the same ranked-first healthy upstream.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Sequence

import httpx

from rollout_dataset.proxy.call import ServedBy
from rollout_dataset.proxy.on_policy_upstream import OnPolicyMode
from rollout_dataset.proxy.relay import UpstreamRelay
from rollout_dataset.proxy.rewrite import RequestRewriter

__all__ = ["UpstreamLane", "UpstreamPool", "rendezvous_rank", "HEALTH_INTERVAL_S", "HEALTH_TIMEOUT_S",
           "HEALTH_BODY_CAP", "PLACEMENT_DIR"]

log = logging.getLogger(__name__)

#: seconds between two health checks of every upstream (per process).
HEALTH_INTERVAL_S = 5.0
#: seconds one health check may take (connect and answer).
HEALTH_TIMEOUT_S = 3.0
#: bytes of a health check's answer read (the rest is dropped with the connection).
HEALTH_BODY_CAP = 256 * 1024
#: sessions whose placement one process remembers (least recently used forgotten first; re-read from
#: the placement file with workers, else placed again as new).
MAX_REMEMBERED_SESSIONS = 65536
#: the folder, under the trace folder, of the placement files shared by workers.
PLACEMENT_DIR = Path(".proxy-state") / "upstreams"


class UpstreamLane:
    """One upstream and the stages that talk to it.

    Args:
        index: its position in the proxy's upstream list.
        display: its URL as it may be printed (redacted).
        transport: the transport that reaches it (credentials added).
        rewriter: the rewriting stage built for it.
        relay: the forwarding stage built for it.
        on_policy: on-policy mode for it, or None.
        root: its root URL without credentials (health checks go to ``root + "/v1/models"``).
    """

    def __init__(self, index: int, display: str, transport: httpx.AsyncBaseTransport, rewriter: RequestRewriter,
                 relay: UpstreamRelay, on_policy: OnPolicyMode | None, root: str) -> None:
        self.index = index
        self.display = display
        self.root = root
        self.transport = transport
        self.rewriter = rewriter
        self.relay = relay
        self.on_policy = on_policy
        self.inflight = 0
        self.healthy = True
        self.problem: str | None = None  # why it is unhealthy

    def mark(self, healthy: bool, problem: str | None = None) -> None:
        """Set its health, logging a change once.

        Args:
            healthy: whether it takes new sessions.
            problem: why not (one line), when unhealthy.
        """
        if healthy != self.healthy:
            if healthy:
                log.warning("model server %s is healthy again: it takes new sessions", self.display)
            else:
                log.warning("model server %s is unhealthy (%s): its sessions move to another", self.display, problem)
        self.healthy = healthy
        self.problem = None if healthy else problem


def rendezvous_rank(session: str, names: Sequence[str]) -> list[int]:
    """The upstreams' order of preference for a session (rendezvous, or highest-random-weight, hashing).

    The same on every worker and every run; removing an upstream moves only its own sessions.

    Args:
        session: the proxy session id.
        names: the upstreams' URLs (as displayed), in the proxy's order.

    Returns:
        Indices into `names`, most preferred first.
    """
    def weight(i: int) -> bytes:
        return hashlib.sha256(f"{session}\x00{i}\x00{names[i]}".encode()).digest()
    return sorted(range(len(names)), key=weight, reverse=True)


class UpstreamPool:
    """The upstreams of one proxy process, where each session goes, and their health.

    Args:
        lanes: one per upstream, in the proxy's order.
        placement_dir: where workers share placements (None: one process, placements in memory).
        check_health: run the periodic health checks (only worth it with several upstreams).
    """

    def __init__(self, lanes: list[UpstreamLane], placement_dir: Path | None = None, check_health: bool = True) -> None:
        if not lanes:
            raise ValueError("a proxy needs at least one upstream")
        self.lanes = lanes
        self.names = [lane.display for lane in lanes]
        self._only = ServedBy(0, self.names[0])  # one upstream: every call's placement (never changed)
        self.placement_dir = placement_dir
        self.check_health = check_health and len(lanes) > 1
        self._placed: OrderedDict[str, int] = OrderedDict()
        self._checker: asyncio.Task[None] | None = None
        self._placement_failed = False

    @property
    def several(self) -> bool:
        """Whether there is more than one upstream (records then name theirs)."""
        return len(self.lanes) > 1

    # ---- placement ----------------------------------------------------------------------------

    def place(self, session: str) -> ServedBy:
        """The upstream that serves a session's next call (see the module's rules).

        Args:
            session: a valid proxy session id.

        Returns:
            The upstream (its lane index and URL) and, when the session just moved, where from and why.
        """
        if len(self.lanes) == 1:
            return self._only
        self._start_checks()
        current = self._placed.get(session)
        if current is None and self.placement_dir is not None:
            current = self._read_placement(session)
        if current is not None:
            lane = self.lanes[current]
            if lane.healthy or not any(other.healthy for other in self.lanes):
                self._remember(session, current)
                return ServedBy(current, lane.display)
            target = self._ranked_healthy(session)[0]
            self._remember(session, target)
            if self.placement_dir is not None:
                self._write_placement(session, target, replace=True)
            log.info("session %s moved from %s to %s", session, lane.display, self.names[target])
            return ServedBy(target, self.names[target], moved_from=lane.display,
                            moved_because=lane.problem or "unhealthy")
        ranked = self._ranked_healthy(session)
        target = min(ranked, key=lambda i: (self.lanes[i].inflight, ranked.index(i)))
        if self.placement_dir is not None:
            target = self._write_placement(session, target, replace=False)
        self._remember(session, target)
        return ServedBy(target, self.names[target])

    def _ranked_healthy(self, session: str) -> list[int]:
        ranked = rendezvous_rank(session, self.names)
        healthy = [i for i in ranked if self.lanes[i].healthy]
        return healthy or ranked

    def _remember(self, session: str, index: int) -> None:
        self._placed[session] = index
        self._placed.move_to_end(session)
        while len(self._placed) > MAX_REMEMBERED_SESSIONS:
            self._placed.popitem(last=False)

    def _placement_path(self, session: str) -> Path:
        assert self.placement_dir is not None
        return self.placement_dir / session

    def _read_placement(self, session: str) -> int | None:
        """A session's placement as another worker wrote it (``index url``), or None."""
        try:
            text = self._placement_path(session).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._warn_placement(exc)
            return None
        index_text, _, name = text.strip().partition(" ")
        if index_text.isdigit() and int(index_text) < len(self.names) and self.names[int(index_text)] == name:
            return int(index_text)
        return None  # written by a proxy with other upstreams: placed again

    def _write_placement(self, session: str, index: int, *, replace: bool) -> int:
        """Save a placement for the other workers; a new one loses to one already saved (returned)."""
        assert self.placement_dir is not None
        path = self._placement_path(session)
        temporary = path.with_name(f".{session}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(f"{index} {self.names[index]}\n", encoding="utf-8")
            try:
                if replace:
                    os.replace(temporary, path)
                    return index
                try:
                    os.link(temporary, path)
                    return index
                except FileExistsError:
                    won = self._read_placement(session)
                    if won is not None and (self.lanes[won].healthy or not any(x.healthy for x in self.lanes)):
                        return won
                    os.replace(temporary, path)
                    return index
            finally:
                temporary.unlink(missing_ok=True)
        except OSError as exc:
            self._warn_placement(exc)
            return index

    def _warn_placement(self, exc: OSError) -> None:
        if not self._placement_failed:
            self._placement_failed = True
            log.warning("could not share session placements with the other workers (%s): a session's calls may "
                        "reach different model servers", exc)

    # ---- load and health ----------------------------------------------------------------------

    def started(self, served: ServedBy) -> None:
        """Count a call in flight on its upstream.

        Args:
            served: the placement of the call.
        """
        self.lanes[served.index].inflight += 1

    def ended(self, served: ServedBy, error_kind: str | None, message: str = "") -> None:
        """Count a call out; one that could not reach its upstream marks it unhealthy.

        Args:
            served: the placement of the call.
            error_kind: the call's error kind, or None.
            message: the call's error message (the reason shown for a move).
        """
        lane = self.lanes[served.index]
        lane.inflight = max(0, lane.inflight - 1)
        if error_kind == "upstream_unreachable" and self.several:
            lane.mark(False, message[:300] or "unreachable")

    def _start_checks(self) -> None:
        if self.check_health and self._checker is None:
            self._checker = asyncio.ensure_future(self._check_forever())

    async def _check_forever(self) -> None:
        while True:
            await self.check_all()
            await asyncio.sleep(HEALTH_INTERVAL_S)

    async def check_all(self) -> None:
        """Check every upstream once, at the same time (`HEALTH_TIMEOUT_S` each)."""
        await asyncio.gather(*(self._check(lane) for lane in self.lanes))

    async def _check(self, lane: UpstreamLane) -> None:
        request = httpx.Request("GET", lane.root + "/v1/models",
                                extensions={"timeout": httpx.Timeout(HEALTH_TIMEOUT_S).as_dict()})
        problem: str | None = None
        try:
            async with asyncio.timeout(HEALTH_TIMEOUT_S):
                response = await lane.transport.handle_async_request(request)
                try:
                    read = 0
                    async for chunk in response.aiter_raw():
                        read += len(chunk)
                        if read > HEALTH_BODY_CAP:
                            break
                finally:
                    await response.aclose()
            if not 200 <= response.status_code < 300:
                problem = f"GET /v1/models answered HTTP {response.status_code}"
        except (TimeoutError, httpx.TimeoutException):
            problem = f"GET /v1/models did not answer within {HEALTH_TIMEOUT_S:g} s"
        except httpx.HTTPError as exc:
            problem = f"GET /v1/models failed: {type(exc).__name__}: {exc}"[:300]
        except Exception as exc:  # noqa: BLE001 - a check never takes the proxy down
            problem = f"GET /v1/models failed: {type(exc).__name__}"
        lane.mark(problem is None, problem)

    async def aclose(self) -> None:
        """Stop the health checks."""
        checker, self._checker = self._checker, None
        if checker is not None:
            checker.cancel()
            try:
                await checker
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping
                pass

    def status(self) -> list[dict[str, Any]]:
        """Each upstream's URL, health and calls in flight in this process (for logs and tests).

        Returns:
            One dict per upstream, in the proxy's order.
        """
        return [{"url": lane.display, "healthy": lane.healthy, "problem": lane.problem, "inflight": lane.inflight}
                for lane in self.lanes]
