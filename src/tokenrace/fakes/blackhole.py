"""A local address whose connects hang: for testing connect timeouts without a network.

A listening socket with a backlog of 0 whose accept queue is filled and never drained: Linux then
drops further SYNs (tcp_abort_on_overflow is 0 by default), so a connect to it neither succeeds nor
is refused until the caller's own timeout fires, as with an unroutable or firewalled host.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

_FILL = 4  # more than the queue holds (backlog + 1), whatever the kernel rounds to


@contextmanager
def blackhole() -> Iterator[int]:
    """Yield a port on 127.0.0.1 where connects hang; closed on exit."""
    listener = socket.socket()
    fillers: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        for _ in range(_FILL):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            fillers.append(s)
        yield port
    finally:
        for s in fillers:
            s.close()
        listener.close()
