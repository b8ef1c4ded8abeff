"""What can go wrong when the operator asks Slurm, as a small tree the reconcilers branch on.

Every `SlurmError` renders as one line (no newline, bounded length) so that `str(error)` can go straight into a
Kubernetes condition message or a log line. The classes say what a caller should do: `SlurmUnavailable` is worth a
retry, `SlurmAuthError` needs the key or the user fixed, `SlurmApiError` is Slurm refusing this request (its
`SlurmUnknownNodeError`: for a node Slurm does not know), and
`SlurmProtocolError` means the answer was not what this client understands (wrong version, a proxy in the way), and
its `SlurmAnswerTooLargeError` an answer over the operator's cap in bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

# Long enough for Slurm's own error texts, short enough for a condition message and a log line.
MAX_MESSAGE = 300


def one_line(text: str, *, limit: int = MAX_MESSAGE) -> str:
    """`text` on one line (runs of whitespace collapsed), cut to `limit` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class SlurmError(Exception):
    """Base of every error the Slurm client raises; `str()` is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class SlurmUnavailable(SlurmError):  # noqa: N818 - the name the reconcilers are written against
    """slurmrestd or slurmctld could not be reached in time: connection refused or reset, DNS failure, deadline
    exceeded, a 5xx without a Slurm error body, or slurmrestd reporting that slurmctld does not answer."""


class SlurmAuthError(SlurmError):
    """The token or the user was rejected (401/403, or Slurm's own authentication/permission errors)."""


class SlurmApiError(SlurmError):
    """Slurm answered and refused: `errors` holds Slurm's error texts, `status` the HTTP status."""

    def __init__(self, message: str, *, status: int, errors: Sequence[str]) -> None:
        super().__init__(message)
        self.status = status
        self.errors = list(errors)


class SlurmUnknownNodeError(SlurmApiError):
    """Slurm knows no node of a name the request gave (ESLURM_INVALID_NODE_NAME): a dynamic node deleted since it was
    read (its pod's preStop, a scale-in). slurmctld refuses a whole node update for one such name, changing nothing."""


class SlurmProtocolError(SlurmError):
    """An answer this client cannot use: not JSON, or JSON of the wrong shape (missing or mistyped fields)."""


class SlurmAnswerTooLargeError(SlurmProtocolError):
    """slurmrestd's answer is larger than the operator reads (`limit` bytes, slurm/answer.py): reading stopped there,
    so that one broken or hostile slurmrestd cannot run the operator that serves every cluster out of memory.
    Retrying helps only once the answer shrinks (fewer jobs kept) or the cap is raised."""

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit
