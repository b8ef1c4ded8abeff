"""The operator's directory probe against a small LDAP server of the test's own (a bind and StartTLS, in BER, over a
real TLS socket with a CA made here): a good bind, a wrong password, a CA that did not sign the server, a closed port,
a server that never answers, and StartTLS."""

from __future__ import annotations

import asyncio
import datetime
import socket
import ssl
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from slurmctl.reconcilers.directory_probe import (
    Outcome,
    _read_message,
    _read_tlv,
    _tlv,
    probe,
    result_code,
)

DN, PASSWORD = "cn=sssd,dc=example,dc=com", "s3cret"


def _ca_and_server() -> tuple[str, str, str]:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "probe test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1)).not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    return ca.public_bytes(pem).decode(), cert.public_bytes(pem).decode(), key_pem


CA, CERT, KEY = _ca_and_server()
OTHER_CA = _ca_and_server()[0]


def _server_context() -> ssl.SSLContext:
    directory = Path(tempfile.mkdtemp())
    (directory / "cert.pem").write_text(CERT)
    (directory / "key.pem").write_text(KEY)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    return context


def _response(message_id: int, app_tag: int, code: int) -> bytes:
    op = _tlv(app_tag, _tlv(0x0A, bytes([code])) + _tlv(0x04, b"") + _tlv(0x04, b"diag"))
    return _tlv(0x30, _tlv(0x02, bytes([message_id])) + op)


@asynccontextmanager
async def ldap_server(*, tls: bool, silent: bool = False) -> AsyncIterator[int]:
    """A server on localhost: ldaps (tls) or ldap with StartTLS; answers binds (49 unless DN and PASSWORD)."""
    context = _server_context()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                message = await _read_message(reader)
                if silent:
                    await asyncio.Event().wait()  # never answers: the probe's own deadline must end the bind
                _, body, _ = _read_tlv(message, 0)
                _, message_id, at = _read_tlv(body, 0)
                tag, op, _ = _read_tlv(body, at)
                if tag == 0x77:  # StartTLS
                    writer.write(_response(message_id[0], 0x78, 0))
                    await writer.drain()
                    await writer.start_tls(context)
                    continue
                _, _, at = _read_tlv(op, 0)
                _, dn, at = _read_tlv(op, at)
                _, password, _ = _read_tlv(op, at)
                ok = dn.decode() == DN and password.decode() == PASSWORD
                writer.write(_response(message_id[0], 0x61, 0 if ok else 49))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "localhost", 0, ssl=context if tls else None)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port
    finally:
        server.close()


async def test_a_good_bind_over_ldaps_is_ok_and_a_wrong_password_is_refused() -> None:
    async with ldap_server(tls=True) as port:
        uri = f"ldaps://localhost:{port}"
        good = await probe(uri, start_tls=False, ca_pem=CA, dn=DN, password=PASSWORD, deadline_seconds=5)
        assert good.outcome is Outcome.OK, good
        wrong = await probe(uri, start_tls=False, ca_pem=CA, dn=DN, password="nope", deadline_seconds=5)
        assert wrong.outcome is Outcome.BIND_REFUSED and "invalidCredentials" in wrong.detail, wrong


async def test_a_server_the_ca_did_not_sign_is_refused() -> None:
    async with ldap_server(tls=True) as port:
        result = await probe(
            f"ldaps://localhost:{port}", start_tls=False, ca_pem=OTHER_CA, dn=DN, password=PASSWORD, deadline_seconds=5
        )
        assert result.outcome is Outcome.TLS_REFUSED, result
        assert "CERTIFICATE_VERIFY_FAILED" in result.detail, result
    bad = await probe(
        "ldaps://localhost:1", start_tls=False, ca_pem="not a pem", dn=DN, password="x", deadline_seconds=5
    )
    assert bad.outcome is Outcome.TLS_REFUSED, bad


async def test_start_tls_then_bind() -> None:
    async with ldap_server(tls=False) as port:
        uri = f"ldap://localhost:{port}"
        result = await probe(uri, start_tls=True, ca_pem=CA, dn=DN, password=PASSWORD, deadline_seconds=5)
        assert result.outcome is Outcome.OK, result
        other = await probe(uri, start_tls=True, ca_pem=OTHER_CA, dn=DN, password=PASSWORD, deadline_seconds=5)
        assert other.outcome is Outcome.TLS_REFUSED, other


async def test_a_closed_port_and_a_silent_server_are_unreachable_within_the_deadline() -> None:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        closed = sock.getsockname()[1]
    uri = f"ldaps://localhost:{closed}"
    result = await probe(uri, start_tls=False, ca_pem=CA, dn=DN, password="x", deadline_seconds=5)
    assert result.outcome is Outcome.UNREACHABLE, result
    async with ldap_server(tls=True, silent=True) as port:
        loop = asyncio.get_running_loop()
        start = loop.time()
        uri = f"ldaps://localhost:{port}"
        silent = await probe(uri, start_tls=False, ca_pem=CA, dn=DN, password="x", deadline_seconds=1)
        assert silent.outcome is Outcome.UNREACHABLE and "within 1s" in silent.detail, silent
        assert loop.time() - start < 3


def test_result_code_reads_a_bind_response_and_refuses_garbage() -> None:
    assert result_code(_response(1, 0x61, 49)) == (49, "diag")
    for garbage in (b"", b"\x30", b"\x30\x05\x02\x01\x01", b"HTTP/1.1 400"):
        try:
            result_code(garbage)
        except ValueError:
            continue
        raise AssertionError(f"accepted {garbage!r}")
