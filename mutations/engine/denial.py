"""The engine's one exception: a Pod it refuses, with the field at fault and what is accepted."""

from __future__ import annotations


class Denial(Exception):
    """A Pod the webhook refuses: `message` says what was wrong and what is accepted."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message
