"""The `directory` reconciler: DirectoryReachable from the operator's own bind to spec.identity.directory (against the
probe tests' LDAP server on localhost), one Warning Event per new finding naming the field, nothing without a
directory, and no effect on the phase."""

from __future__ import annotations

from typing import Any

from test.unit.reconcilers.env import NS, Env, spec
from test.unit.reconcilers.test_directory_probe import CA, DN, OTHER_CA, PASSWORD, ldap_server


def _directory(port: int, **fields: Any) -> dict[str, Any]:
    return {
        "uris": [f"ldaps://localhost:{port}"],
        "baseDN": "dc=example,dc=com",
        "bindDN": DN,
        "bindPasswordSecretRef": {"name": "ldap-bind"},
        "ca": {"configMapKeyRef": {"name": "ldap-ca"}},
        **fields,
    }


def _ca(env: Env, pem: str) -> None:
    metadata = {"name": "ldap-ca", "namespace": NS}
    env.fake.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"ca.crt": pem}})


def _warnings(env: Env) -> list[tuple[str, str]]:
    return [(reason, message) for kind, reason, message in env.events() if kind == "Warning"]


async def test_without_a_directory_nothing_is_said() -> None:
    async with Env() as env:
        env.create(spec())
        await env.run("directory")
        assert env.condition("DirectoryReachable") is None


async def test_a_good_bind_is_reachable_and_each_bad_input_is_one_event_naming_its_field() -> None:
    async with ldap_server(tls=True) as port, Env() as env:
        env.secret("ldap-bind", {"password": PASSWORD.encode()})
        _ca(env, CA)
        env.create(spec(identity={"directory": _directory(port)}))
        await env.run("directory")
        assert env.reason("DirectoryReachable") == ("True", "Reachable")
        assert _warnings(env) == []
        # A wrong password.
        env.secret("ldap-bind", {"password": b"wrong"})
        await env.run("directory")
        await env.run("directory")
        assert env.reason("DirectoryReachable") == ("False", "DirectoryBindRefused")
        (event,) = _warnings(env)
        assert event[0] == "DirectoryBindRefused" and "spec.identity.directory.bindDN" in event[1], event
        assert "wrong" not in event[1]
        # A CA that did not sign the server.
        env.secret("ldap-bind", {"password": PASSWORD.encode()})
        _ca(env, OTHER_CA)
        await env.run("directory")
        assert env.reason("DirectoryReachable") == ("False", "DirectoryCertificateRefused")
        assert "spec.identity.directory.ca" in env.condition("DirectoryReachable")["message"]  # type: ignore[index]
        # The CA ConfigMap gone.
        await env.fake.delete("v1", "ConfigMap", "ldap-ca", namespace=NS)
        await env.run("directory")
        assert env.reason("DirectoryReachable") == ("False", "DirectorySecretMissing")
        # Back to good: reachable again; the phase never counted it.
        _ca(env, CA)
        await env.run("directory")
        assert env.reason("DirectoryReachable") == ("True", "Reachable")
        reasons = [reason for reason, _ in _warnings(env)]
        assert reasons == ["DirectoryBindRefused", "DirectoryCertificateRefused", "DirectorySecretMissing"]


async def test_an_unreachable_directory_names_the_uris_and_retries_soon() -> None:
    async with ldap_server(tls=True) as port, Env() as env:
        env.secret("ldap-bind", {"password": PASSWORD.encode()})
        _ca(env, CA)
        env.create(spec(identity={"directory": _directory(port, uris=["ldaps://localhost:1"])}))
        results = await env.run("directory")
        assert env.reason("DirectoryReachable") == ("False", "DirectoryUnreachable")
        message = env.condition("DirectoryReachable")["message"]  # type: ignore[index]
        assert message.startswith("spec.identity.directory.uris: ldaps://localhost:1: cannot connect"), message
        result = results["directory"]
        assert result is not None and result.requeue_after is not None and result.requeue_after <= 15
        # A second URI that answers: the first unreachable one does not matter.
        env.edit(lambda s: s["identity"]["directory"].update(uris=["ldaps://localhost:1", f"ldaps://localhost:{port}"]))
        await env.run("directory")
        assert env.reason("DirectoryReachable") == ("True", "Reachable")
