"""The lanes of a waiting room, as every part of the mesh names them: the
general lane is "" (and may be called "general"); any other lane's name is
1 to 32 of a-z, 0-9 and '-', not starting with '-'."""

from __future__ import annotations

import re

GENERAL = ""
NAME_MAX = 32
_NAME = re.compile(rf"[a-z0-9][a-z0-9-]{{0,{NAME_MAX - 1}}}")


def is_name(value: str) -> bool:
    """Whether ``value`` is the name a lane besides the general one may have."""
    return value != "general" and _NAME.fullmatch(value) is not None
