"""Running out of file descriptors: how the proxy tells, and the one warning it logs about it.

A proxy at its descriptor limit (``RLIMIT_NOFILE``) still records what it answers (the recorder's
spare descriptors), but a connection it cannot accept never reaches it: uvloop's libuv, out of
descriptors in ``accept``, frees a reserve descriptor of its own, accepts every pending connection and
closes it at once, and tells no one. The harness sees the connection reset, and the call has no
record. The proxy cannot see those resets; it sees its own opens fail (a trace file, an upstream
connection), and at the first such failure in a process logs `OUT_OF_DESCRIPTORS_WARNING` once.

The recorder's spare descriptor is handed over (closed so that a trace file can take its number,
then taken back) under `SPARE_HANDOVER_LOCK`, and the only thread of the proxy that opens
descriptors, the lookup of the upstream's host name (`proxy/transport.py`: ``/etc/hosts``,
``resolv.conf``, a DNS socket), runs under the same lock: it cannot take the number a spare frees.
"""

from __future__ import annotations

import errno
import logging
import resource
import threading

__all__ = ["OUT_OF_DESCRIPTORS_WARNING", "SPARE_HANDOVER_LOCK", "out_of_descriptors", "note_out_of_descriptors"]

log = logging.getLogger(__name__)

#: logged once per process at the first open that fails for want of a descriptor (%d: the soft limit).
OUT_OF_DESCRIPTORS_WARNING = ("out of file descriptors (RLIMIT_NOFILE %d): connections the proxy cannot accept "
                              "are reset unread and leave no record; raise `ulimit -n`, or lower the harness's "
                              "concurrency or --max-open-files")

#: held while a spare descriptor is handed over, and by a thread while it opens descriptors (a name
#: lookup): a thread never takes the number a spare frees for a record. Never held across an await.
SPARE_HANDOVER_LOCK = threading.Lock()

_warned = False


def out_of_descriptors(exc: BaseException) -> bool:
    """Whether an error is the want of a descriptor (this process's or the system's).

    Args:
        exc: the error an open, socket or connect raised.

    Returns:
        True for ``EMFILE`` and ``ENFILE``.
    """
    return isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE)


def note_out_of_descriptors(exc: BaseException) -> None:
    """Log `OUT_OF_DESCRIPTORS_WARNING` the first time this process runs out of descriptors.

    Args:
        exc: the error an open, socket or connect raised (any other error is ignored).
    """
    global _warned
    if _warned or not out_of_descriptors(exc):
        return
    _warned = True
    log.warning(OUT_OF_DESCRIPTORS_WARNING, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
