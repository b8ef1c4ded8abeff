"""Reading a slurmrestd answer under a cap in bytes.

slurmrestd runs from an image whoever edits a SlurmCluster chooses, and one operator process reads every cluster's
answers: an answer read whole with no cap lets one broken or hostile slurmrestd run the operator out of memory, and
every cluster with it. `read_answer` refuses an answer larger than the cap before it holds more than the cap: at once
when its Content-Length says so, else as soon as the bytes read pass it, so a chunked answer, or a gzip answer that
inflates past its Content-Length (the bytes counted are the decompressed ones), is cut there. The connection is
closed, not drained, and the failure is a `SlurmAnswerTooLargeError` for that one request: the cluster's readers see
it like any other Slurm failure, other clusters are not touched.

The default is sized from the answers recorded from slurmrestd 24.11 (test/unit/slurm/recorded), pretty-printed as
slurmrestd writes them (a tab per level; two spaces with the json-c of older versions): about 2.0 KB per node
(/nodes/) and 6.5-7.7 KB per job (/jobs/, ~130 fields each). A 10,000-node cluster's /nodes/ answer is ~20 MB, and
20,000 jobs (twice Slurm's default MaxJobCount) are ~130-155 MB: 256 MiB leaves that largest answer at least 1.7x of
room and sits at half the operator's default memory limit (512 Mi, charts/slurmctl/values.yaml). The body is kept in
one bytearray that the decoders read in place, so an answer costs its size once, not twice.
"""

from __future__ import annotations

import aiohttp

from .errors import SlurmAnswerTooLargeError

DEFAULT_MAX_ANSWER_BYTES = 256 * 1024 * 1024

_UNITS = ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB"))


def describe_size(count: int) -> str:
    """`count` bytes as a person reads them: `256 MiB` when it is a whole number of a unit, else `1234567 bytes`."""
    for unit, name in _UNITS:
        if count >= unit and count % unit == 0:
            return f"{count // unit} {name}"
    return f"{count} bytes"


async def read_answer(resp: aiohttp.ClientResponse, *, where: str, limit: int) -> bytearray:
    """The body of `resp`, at most `limit` bytes; else `SlurmAnswerTooLargeError`, with the connection closed (a
    connection left with unread bytes cannot be reused, and reading the rest to reuse it is what the cap prevents)."""
    cap = f"the operator's cap of {describe_size(limit)}"
    declared = resp.content_length
    if declared is not None and declared > limit:
        resp.close()
        raise SlurmAnswerTooLargeError(
            f"{where}: answer larger than {cap} (Content-Length {declared} bytes); not read", limit=limit
        )
    body = bytearray()
    async for chunk in resp.content.iter_any():
        if len(body) + len(chunk) > limit:
            resp.close()
            message = f"{where}: answer larger than {cap}; reading stopped at the cap"
            raise SlurmAnswerTooLargeError(message, limit=limit)
        body += chunk
    return body


__all__ = ["DEFAULT_MAX_ANSWER_BYTES", "describe_size", "read_answer"]
