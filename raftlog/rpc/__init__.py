"""The wire: codec, message registry, aiohttp transport and server routes.

Importing the package registers every wire message (client calls and raft's
peer messages), so ``codec.encode``/``decode`` work for all of them.
"""

from raftlog.rpc import messages, peer  # noqa: F401  (registers message type ids)
