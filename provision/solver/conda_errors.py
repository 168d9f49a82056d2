"""The one error type: what conda would report, by exception name and message."""

from __future__ import annotations


class CondaError(Exception):
    """A failure reported the way conda reports it: exception name + message, exit 1."""

    def __init__(self, name: str, message: str, code: int = 1):
        super().__init__(message)
        self.name, self.message, self.code = name, message, code
