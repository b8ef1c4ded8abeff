"""The operator's Slurm client: slurmrestd over HTTP with JWTs the operator mints itself.

Sits beside the reconcilers (which import it) and knows nothing of Kubernetes, the API types or the renderers.
"""

from .answer import DEFAULT_MAX_ANSWER_BYTES, describe_size
from .client import ACCOUNTING_KINDS, API_VERSION, DEFAULT_TIMEOUT, AccountingKind, SlurmClient
from .errors import (
    SlurmAnswerTooLargeError,
    SlurmApiError,
    SlurmAuthError,
    SlurmError,
    SlurmProtocolError,
    SlurmUnavailable,
    SlurmUnknownNodeError,
)
from .hostlist import HostlistError, expand
from .models import ExitCode, Job, Node, Partition
from .session import new_session
from .token import DEFAULT_LIFETIME, TokenSource, mint_token

__all__ = [
    "ACCOUNTING_KINDS",
    "API_VERSION",
    "DEFAULT_LIFETIME",
    "DEFAULT_MAX_ANSWER_BYTES",
    "DEFAULT_TIMEOUT",
    "AccountingKind",
    "ExitCode",
    "HostlistError",
    "Job",
    "Node",
    "Partition",
    "SlurmAnswerTooLargeError",
    "SlurmApiError",
    "SlurmAuthError",
    "SlurmClient",
    "SlurmError",
    "SlurmProtocolError",
    "SlurmUnavailable",
    "SlurmUnknownNodeError",
    "TokenSource",
    "describe_size",
    "expand",
    "mint_token",
    "new_session",
]
