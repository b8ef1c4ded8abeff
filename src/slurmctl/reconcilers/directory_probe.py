"""The operator's own look at spec.identity.directory: can a server be reached, does its certificate verify against
the given CA, and does it accept the bind DN's password? One LDAP simple bind over TLS (ldaps://, or StartTLS), with
a deadline, hand-encoded in BER (RFC 4511): two requests need no LDAP library.

The sssd sidecars do the real work; this only tells the SlurmCluster's owner, as a condition, what they would meet.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from enum import Enum
from urllib.parse import urlsplit

LDAPS_PORT = 636
LDAP_PORT = 389
START_TLS_OID = b"1.3.6.1.4.1.1466.20037"
INVALID_CREDENTIALS = 49
MAX_ANSWER_BYTES = 64 * 1024


class Outcome(Enum):
    OK = "ok"
    UNREACHABLE = "unreachable"
    TLS_REFUSED = "tls-refused"  # the certificate does not verify (CA, name), or TLS fails
    BIND_REFUSED = "bind-refused"  # invalidCredentials or another bind error
    NOT_LDAP = "not-ldap"  # an answer that is not LDAP


@dataclass(frozen=True)
class ProbeResult:
    uri: str
    outcome: Outcome
    detail: str


def _length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(raw)]) + raw


def _tlv(tag: int, value: bytes) -> bytes:
    return bytes([tag]) + _length(len(value)) + value


def _message(message_id: int, op: bytes) -> bytes:
    return _tlv(0x30, _tlv(0x02, bytes([message_id])) + op)


def bind_request(message_id: int, dn: str, password: str) -> bytes:
    """BindRequest [APPLICATION 0] {version 3, name, simple [0] password}; empty dn and password: anonymous."""
    body = _tlv(0x02, b"\x03") + _tlv(0x04, dn.encode()) + _tlv(0x80, password.encode())
    return _message(message_id, _tlv(0x60, body))


def start_tls_request(message_id: int) -> bytes:
    """ExtendedRequest [APPLICATION 23] {requestName [0] StartTLS's OID}."""
    return _message(message_id, _tlv(0x77, _tlv(0x80, START_TLS_OID)))


def _read_tlv(data: bytes, at: int) -> tuple[int, bytes, int]:
    """(tag, value, next offset) of the element at `at`; ValueError on anything malformed or cut short."""
    if at + 2 > len(data):
        raise ValueError("cut short")
    tag, first = data[at], data[at + 1]
    at += 2
    if first & 0x80:
        count = first & 0x7F
        if count == 0 or count > 4 or at + count > len(data):
            raise ValueError("bad length")
        length = int.from_bytes(data[at : at + count], "big")
        at += count
    else:
        length = first
    if at + length > len(data):
        raise ValueError("cut short")
    return tag, data[at : at + length], at + length


def result_code(message: bytes) -> tuple[int, str]:
    """(resultCode, diagnosticMessage) of an LDAPResult-shaped response (bind or extended)."""
    tag, body, _ = _read_tlv(message, 0)
    if tag != 0x30:
        raise ValueError("not an LDAPMessage")
    _, _, at = _read_tlv(body, 0)  # messageID
    _, op, _ = _read_tlv(body, at)
    code_tag, code, at = _read_tlv(op, 0)
    if code_tag != 0x0A or not code:
        raise ValueError("no resultCode")
    _, _, at = _read_tlv(op, at)  # matchedDN
    _, diagnostic, _ = _read_tlv(op, at)
    return int.from_bytes(code, "big"), diagnostic.decode(errors="replace")[:200]


async def _read_message(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readexactly(2)
    if head[1] & 0x80:
        count = head[1] & 0x7F
        if count == 0 or count > 4:
            raise ValueError("bad length")
        extra = await reader.readexactly(count)
        length = int.from_bytes(extra, "big")
        head += extra
    else:
        length = head[1]
    if length > MAX_ANSWER_BYTES:
        raise ValueError("answer too long")
    return head + await reader.readexactly(length)


def tls_context(ca_pem: str | None) -> ssl.SSLContext:
    """Verifying, like sssd's `ldap_tls_reqcert = demand`: the given CA, else the system's."""
    context = ssl.create_default_context(cadata=ca_pem) if ca_pem else ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


async def _bind(  # noqa: PLR0911 - one return per thing a server can answer
    uri: str, *, start_tls: bool, context: ssl.SSLContext, dn: str, password: str
) -> ProbeResult:
    parts = urlsplit(uri)
    host = parts.hostname or ""
    port = parts.port or (LDAPS_PORT if parts.scheme == "ldaps" else LDAP_PORT)
    try:
        if parts.scheme == "ldaps":
            reader, writer = await asyncio.open_connection(host, port, ssl=context, server_hostname=host)
        else:
            reader, writer = await asyncio.open_connection(host, port)
    except ssl.SSLError as exc:
        return ProbeResult(uri, Outcome.TLS_REFUSED, f"TLS failed: {exc.reason or exc}")
    except OSError as exc:
        return ProbeResult(uri, Outcome.UNREACHABLE, f"cannot connect to {host}:{port}: {exc.strerror or exc}")
    try:
        message_id = 1
        if parts.scheme == "ldap" and start_tls:
            writer.write(start_tls_request(message_id))
            await writer.drain()
            code, diagnostic = result_code(await _read_message(reader))
            if code != 0:
                return ProbeResult(uri, Outcome.TLS_REFUSED, f"StartTLS refused (result {code}: {diagnostic})")
            try:
                await writer.start_tls(context, server_hostname=host)
            except ssl.SSLError as exc:
                return ProbeResult(uri, Outcome.TLS_REFUSED, f"TLS failed: {exc.reason or exc}")
            message_id += 1
        writer.write(bind_request(message_id, dn, password))
        await writer.drain()
        code, diagnostic = result_code(await _read_message(reader))
    except (ValueError, asyncio.IncompleteReadError) as exc:
        return ProbeResult(uri, Outcome.NOT_LDAP, f"not an LDAP answer: {exc}")
    except OSError as exc:
        return ProbeResult(uri, Outcome.UNREACHABLE, f"connection to {host}:{port} lost: {exc}")
    finally:
        writer.close()
    if code == INVALID_CREDENTIALS:
        return ProbeResult(uri, Outcome.BIND_REFUSED, "the bind DN or its password is refused (invalidCredentials)")
    if code != 0:
        return ProbeResult(uri, Outcome.BIND_REFUSED, f"the bind is refused (result {code}: {diagnostic})")
    return ProbeResult(uri, Outcome.OK, "bind accepted")


async def probe(
    uri: str, *, start_tls: bool, ca_pem: str | None, dn: str, password: str, deadline_seconds: float
) -> ProbeResult:
    """One bind to `uri` within `deadline_seconds`; never raises for what the server or the network does."""
    try:
        return await asyncio.wait_for(
            _bind(uri, start_tls=start_tls, context=tls_context(ca_pem), dn=dn, password=password), deadline_seconds
        )
    except TimeoutError:
        return ProbeResult(uri, Outcome.UNREACHABLE, f"no answer within {deadline_seconds:g}s")
    except ssl.SSLError as exc:  # a CA that does not parse
        return ProbeResult(uri, Outcome.TLS_REFUSED, f"the CA cannot be used: {exc.reason or exc}")
