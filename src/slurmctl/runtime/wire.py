"""The JSON codec between the operator and the API server, in one place: msgspec, into and from the plain dicts and
lists the rest of the runtime works with. Why msgspec: it decodes several times faster than json.loads and shares
dict keys between the objects it makes (the informer caches hold millions of them); it encodes a body without the
walk kubernetes-asyncio would make of it first."""

from __future__ import annotations

from typing import Any

import msgspec

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()
_sorted = msgspec.json.Encoder(order="sorted")


def decode(data: bytes) -> Any:
    """JSON bytes as plain dicts and lists; a `ValueError` (msgspec.DecodeError) when they are not JSON."""
    return _decoder.decode(data)


def encode(value: Any) -> bytes:
    """Compact JSON."""
    return _encoder.encode(value)


def canonical(value: Any) -> bytes:
    """Compact JSON with sorted keys: equal values, equal bytes (what digests are taken of)."""
    return _sorted.encode(value)
