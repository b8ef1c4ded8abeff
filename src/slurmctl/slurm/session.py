"""The aiohttp session the operator talks to slurmrestd with: aiohttp's, but able to read slurmrestd 26.05's answer to a
request slurmctld rejects.

slurmrestd 26.05.5 answers such a request (a token slurmctld refuses, any handler error) with two HTTP responses on
one connection: first the JSON error (`Connection: Close`, a `Content-Length`), then a second, text/plain, response.
aiohttp's parser refuses the bytes after a complete `Connection: close` answer ("Data after `Connection: close`") and
the first answer is lost with them when both arrive together, so the operator would report an unreachable slurmrestd
(`SlurmUnavailable`) where slurmctld said "authentication error" (`SlurmAuthError`). curl reads the first answer and
ignores the rest ("Excess found in a read"); `new_session()` does the same, and nothing more:

- bytes are dropped only once an answer that said `Connection: close` has been read to its end (its body complete),
  and only when they start a new status line (`HTTP/1.`), which is what slurmrestd sends; the connection is closed;
- everything else (keep-alive answers, chunked bodies, a body that contains "HTTP/1.", trailing bytes that are not a
  response) reaches aiohttp's parser exactly as before, with its errors.

It hooks aiohttp's connection protocol (`ResponseHandler`) through `TCPConnector._factory`: aiohttp has no public way to
choose the protocol, and its parsers (C and Python) have no setting for this. `test/unit/slurm/test_session.py` checks
the hook still takes effect, so an aiohttp upgrade that moves it fails there, not in production.
"""

from __future__ import annotations

import functools
import logging
from typing import cast

import aiohttp
from aiohttp.client_proto import ResponseHandler

log = logging.getLogger(__name__)

_STATUS_LINE = b"HTTP/1."


class _ClosingAnswerHandler(ResponseHandler):
    """aiohttp's protocol, which drops what a server sends after a complete answer that closed the connection."""

    def data_received(self, data: bytes) -> None:
        # Feed the parser up to each possible status line separately (the parser is a stream: the same bytes in more
        # calls parse the same), so that a complete closing answer is seen before the bytes after it are parsed.
        start = 0
        while True:
            if data.startswith(_STATUS_LINE, start) and self._closing_answer_complete():
                self._drop(len(data) - start)
                return
            cut = data.find(_STATUS_LINE, start + 1)
            if cut < 0:
                break
            super().data_received(data[start:cut])
            start = cut
        if start < len(data) or not data:
            super().data_received(data[start:])

    def _closing_answer_complete(self) -> bool:
        """An answer that said `Connection: close` was parsed to the end of its body, with no error so far."""
        payload = self._payload
        return self._should_close and self._exception is None and payload is not None and payload.is_eof()

    def _drop(self, count: int) -> None:
        log.debug("dropped %d bytes the server sent after a complete answer that closed the connection", count)
        if self.transport is not None:
            self.transport.close()


class SlurmrestdConnector(aiohttp.TCPConnector):
    """A `TCPConnector` whose connections read slurmrestd's double answers (see the module's docstring)."""

    def __init__(self) -> None:
        super().__init__()
        handler = functools.partial(_ClosingAnswerHandler, loop=self._loop)
        self._factory = cast("functools.partial[ResponseHandler]", handler)


def new_session() -> aiohttp.ClientSession:
    """A session for `SlurmClient`: slurmrestd is reached on pod IPs only, so no proxy lookups and no netrc
    (`trust_env=False`). Must be called inside the event loop that will use it."""
    return aiohttp.ClientSession(connector=SlurmrestdConnector(), trust_env=False)


__all__ = ["SlurmrestdConnector", "new_session"]
