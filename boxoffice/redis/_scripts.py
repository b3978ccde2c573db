"""Lua scripts kept as ``.lua`` files of a package's ``lua/`` folder, known
by their source and SHA1, loaded the same way by every service.

Every key a script touches arrives through ``KEYS`` and the clock through
``ARGV``, so that a script is a pure function of its arguments and of the
keys of one hash slot.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError

from boxoffice.redis._client import RedisClient
from boxoffice.redis._pipe import Arg


@dataclass(frozen=True, slots=True)
class Script:
    """A Lua script known by its source and SHA1."""

    name: str
    source: str
    sha: str

    async def run(self, client: RedisClient, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """Run the script on ``client`` alone (EVALSHA, loading it on
        NOSCRIPT; a cluster client sends it to the node of the keys' slot
        and loads the script on every primary). Callers on a hot path batch
        through ``ScriptBatcher``."""
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await client.script_load(self.source)
            return await client.evalsha(self.sha, len(keys), *keys, *args)


def load_script(package: str, name: str) -> Script:
    """``<package>/lua/<name>.lua``."""
    source = resources.files(package).joinpath("lua", f"{name}.lua").read_text()
    return Script(name=name, source=source, sha=hashlib.sha1(source.encode()).hexdigest())
