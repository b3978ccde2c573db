"""Micro-batching: concurrent callers' items gathered into batches that one
function handles at once (one statement, one round trip), each caller
answered with its own result or error.

Public face: :class:`MicroBatcher`.
"""

from boxoffice.batching._micro import MicroBatcher

__all__ = ["MicroBatcher"]
