"""Room in the process's limit of open files for the connections a front end may hold.

Every connection holds a file descriptor. Many systems start a process with a soft limit far
below its hard one, and below the default --max-connections (systemd's default, which container
runtimes may pass on), and a front end that reaches its soft limit cannot accept: the event loop's accept fails and the
connection is dropped, where --max-connections would have answered it 503. So the front end raises its soft
limit, within the hard one, to what --max-connections needs, as Go's runtime and nginx's
worker_rlimit_nofile do; where the hard limit is too low for that, it says so once.
"""

from __future__ import annotations

import logging
import resource

logger = logging.getLogger("rose_embed.server")

# Descriptors a front end holds besides its connections: the listening socket, its links to the
# engines and part processes, shared memory, the event loop's own, the log.
RESERVED_DESCRIPTORS = 256


def make_room_for_connections(max_connections: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = max_connections + RESERVED_DESCRIPTORS
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if raised > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    if raised < needed:
        logger.warning("the limit of open files (%d, ulimit -n) leaves room for about %d connections, fewer than "
                       "--max-connections %d: connections past it are dropped instead of answered 503; raise the "
                       "limit or lower --max-connections", raised, raised - RESERVED_DESCRIPTORS, max_connections)
