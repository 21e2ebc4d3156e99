"""braid's exceptions. The C++ bindings raise these (see csrc/core_module.cc).

They subclass the matching builtins so that ``except TimeoutError`` and
``except RuntimeError`` keep working in code that does not know braid; bad arguments
raise the builtin ``ValueError``.
"""


class Error(RuntimeError):
    """Base of braid's errors. ``code`` is the C API's braidResult_t value."""

    def __init__(self, message, rank=-1, code=-1):
        super().__init__(message)
        self.rank = rank
        self.code = code


class RemoteError(Error):
    """A peer died, closed its connection or reported a failure; ``rank`` names it (or -1)."""


class TimeoutError(Error, TimeoutError):  # noqa: A001 - deliberately shadows the builtin name
    """No progress within the timeout (BRAID_TIMEOUT); ``rank`` is the rank that stalled, or -1."""


class RevokedError(Error):
    """The communicator was revoked (``revoke()`` on any rank); shrink it or close it."""
