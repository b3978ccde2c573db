"""A command's stdout when the reader of its pipe goes away (``boxoffice
admin event create FILE | head -1``): the command finishes its work
quietly instead of dying halfway with ``BrokenPipeError``."""

from __future__ import annotations

import io
import os
from typing import TextIO

# The exit code of a command whose stdout was closed under it (a shell
# reports a process killed by SIGPIPE as 128 + 13).
STDOUT_CLOSED = 141


class QuietStdout(io.TextIOBase):
    """Writes to ``stream`` until its reader is gone; from then on what is
    written goes nowhere (file descriptor and all, so that the interpreter's
    own flush at exit cannot fail either), and ``gone`` says so."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self.stream.write(text)
            except BrokenPipeError:
                self._silence()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._silence()

    def isatty(self) -> bool:
        return not self.gone and self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.stream.encoding

    def _silence(self) -> None:
        self.gone = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self.stream.fileno())
        finally:
            os.close(devnull)
