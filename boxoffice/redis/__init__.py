"""Redis for every service: the process's client, event keys under one hash
tag, Lua scripts loaded from package files, and the batcher that sends
concurrent callers' scripts to Redis in shared pipelines over a lean
pipelined connection.

Public face: :func:`create_client`, :data:`RedisClient` (a client or a cluster
client), :class:`RedisComponent`, :func:`event_key`, :func:`slot_of`, :class:`Script`, :func:`load_script`,
:class:`ScriptBatcher`, :class:`PipelinedConnection`, :func:`pack`.
"""

from boxoffice.redis._batcher import ScriptBatcher
from boxoffice.redis._client import RedisClient, RedisComponent, create_client, event_key, slot_of
from boxoffice.redis._pipe import Arg, PipeClosed, PipelinedConnection, ReplyError, encode_args, pack
from boxoffice.redis._scripts import Script, load_script

__all__ = [
    "Arg",
    "PipeClosed",
    "PipelinedConnection",
    "RedisClient",
    "RedisComponent",
    "ReplyError",
    "Script",
    "ScriptBatcher",
    "create_client",
    "encode_args",
    "event_key",
    "load_script",
    "pack",
    "slot_of",
]
