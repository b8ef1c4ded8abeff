"""spec.identity.directory: the sssd sidecar in the pods whose daemons resolve users (sshd, slurmctld, slurmd), its
sssd.conf, and sshd's password and directory keys; without a directory nothing of it is rendered."""

from __future__ import annotations

import json
from typing import Any

import pytest

from slurmctl.api.v1 import SlurmCluster
from slurmctl.reconcilers.registry import desired_objects
from slurmctl.render import sssd
from slurmctl.render.manifests import Inputs
from slurmctl.render.sshd import render_sshd_config
from test.unit.render.samples import VARIANTS, sample_doc
from test.unit.render.test_security_context import LEVELS, level

DIRECTORY: dict[str, Any] = {
    "uris": ["ldaps://ldap1.example.com", "ldaps://ldap2.example.com:636"],
    "baseDN": "dc=example,dc=com",
    "bindDN": "cn=sssd,ou=services,dc=example,dc=com",
    "bindPasswordSecretRef": {"name": "ldap-bind", "key": "pw"},
    "ca": {"configMapKeyRef": {"name": "ldap-ca"}},
    "userFilter": "(memberOf=cn=hpc,ou=groups,dc=example,dc=com)",
}
USERS_RESOLVED_BY = {"sshd", "slurmctld", "slurmd"}


def _cluster(variant: str = "research", **directory: Any) -> SlurmCluster:
    doc = sample_doc(variant)
    if directory:
        doc["spec"]["identity"] = {"directory": directory}
    return SlurmCluster.model_validate(doc)


def _pods(cluster: SlurmCluster) -> list[tuple[str, dict[str, Any]]]:
    """(workload name, pod spec) of every workload the components render."""
    found = []
    for obj in desired_objects(Inputs.offline(cluster)):
        spec = obj.get("spec") or {}
        pod = ((spec.get("jobTemplate") or {}).get("spec", spec).get("template") or {}).get("spec")
        if pod:
            found.append((obj["metadata"]["name"], pod))
    return found


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_without_a_directory_nothing_of_sssd_is_rendered(variant: str) -> None:
    cluster = _cluster(variant)
    text = json.dumps(desired_objects(Inputs.offline(cluster)))
    assert "sssd" not in text and "sss_ssh" not in text
    lines = render_sshd_config(cluster).splitlines()
    assert "PasswordAuthentication no" in lines
    assert not [line for line in lines if line.startswith("AuthorizedKeysCommand")]


def test_every_pod_that_resolves_users_runs_sssd_after_munge_and_others_do_not() -> None:
    cluster = _cluster(**DIRECTORY)
    seen = set()
    for name, pod in _pods(cluster):
        daemon = pod["containers"][0]
        init = [c["name"] for c in pod.get("initContainers", [])]
        if daemon["name"] not in USERS_RESOLVED_BY:
            assert "sssd" not in init, f"{name}: {daemon['name']} resolves no users"
            continue
        seen.add(daemon["name"])
        assert init == ["munge", "sssd"], name
        side = pod["initContainers"][1]
        assert side["restartPolicy"] == "Always"
        assert side["startupProbe"]["exec"]["command"] == ["test", "-S", sssd.NSS_SOCKET]
        assert side["image"] == "ghcr.io/slurmctl/sssd:0.1.0"
        context = side["securityContext"]
        assert context["allowPrivilegeEscalation"] is False and context["capabilities"]["drop"] == ["ALL"]
        assert "SYS_ADMIN" not in context["capabilities"]["add"] and not context.get("privileged")
        # The daemon sees the client side read-only, the sockets and caches, and never the bind password.
        mounts = {m["name"]: m for m in daemon["volumeMounts"]}
        assert mounts["sssd-client"] == {"name": "sssd-client", "mountPath": sssd.CLIENT_DIR, "readOnly": True}
        assert mounts["sssd-pipes"]["mountPath"] == sssd.PIPES_DIR and mounts["sssd-mc"]["mountPath"] == sssd.MC_DIR
        assert "sssd-bind" not in mounts and "sssd-ca" not in mounts
        assert {"name": "SSSD_CLIENT_DIR", "value": sssd.CLIENT_DIR} in daemon["env"]
        side_mounts = {m["name"]: m["mountPath"] for m in side["volumeMounts"]}
        assert side_mounts["sssd-bind"] == sssd.BIND_PASSWORD_MOUNT and side_mounts["sssd-ca"] == sssd.CA_MOUNT
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["sssd-bind"]["secret"] == {
            "secretName": "ldap-bind",
            "items": [{"key": "pw", "path": "password"}],
            "defaultMode": 0o400,
        }
        assert volumes["sssd-ca"]["configMap"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
        assert "munge-socket" in volumes, "the component's own volumes stay"
    assert seen == USERS_RESOLVED_BY


def test_the_controller_keeps_its_state_volume_with_a_directory() -> None:
    """add_sssd adds to the pod's lists in place: the controller renderer appends its state volume afterwards."""
    cluster = _cluster(**DIRECTORY)
    for name, pod in _pods(cluster):
        if pod["containers"][0]["name"] == "slurmctld":
            mounts = {m["name"] for m in pod["containers"][0]["volumeMounts"]}
            volumes = {v["name"] for v in pod["volumes"]}
            assert mounts - volumes <= {"state"}, name  # the primary's claim comes from its volumeClaimTemplates
            assert {"sssd-client", "sssd-pipes"} <= volumes


def test_sssd_conf_points_at_the_directory_without_the_password() -> None:
    cluster = _cluster(**DIRECTORY)
    directory = cluster.spec.identity.directory
    assert directory is not None
    text = sssd.render_sssd_conf(directory)
    lines = text.splitlines()
    assert [line for line in lines if line.startswith("[")][-1] == "[domain/directory]", "the domain section is last"
    assert "ldap_uri = ldaps://ldap1.example.com, ldaps://ldap2.example.com:636" in lines
    assert "ldap_search_base = dc=example,dc=com" in lines
    assert "ldap_user_search_base = dc=example,dc=com?subtree?(memberOf=cn=hpc,ou=groups,dc=example,dc=com)" in lines
    assert "ldap_group_search_base = dc=example,dc=com" in lines
    assert "ldap_default_bind_dn = cn=sssd,ou=services,dc=example,dc=com" in lines
    assert f"ldap_tls_cacert = {sssd.CA_FILE}" in lines and "ldap_tls_reqcert = demand" in lines
    assert "ldap_id_use_start_tls = false" in lines and "ldap_schema = rfc2307" in lines
    assert "cache_credentials = false" in lines and f"min_id = {sssd.MIN_ID}" in lines
    assert "services = nss, pam, ssh" in lines and "ldap_user_ssh_public_key = sshPublicKey" in lines
    assert "authtok" not in text
    side = sssd.sssd_container(cluster, directory)
    assert {"name": "SSSD_CONF", "value": text} in side["env"]
    assert {"name": "SSSD_BIND_PASSWORD_FILE", "value": sssd.BIND_PASSWORD_FILE} in side["env"]


def test_an_anonymous_directory_without_a_ca_mounts_no_secret() -> None:
    cluster = _cluster(uris=["ldap://ldap.example.com"], baseDN="dc=example,dc=com", startTLS=True)
    directory = cluster.spec.identity.directory
    assert directory is not None
    lines = sssd.render_sssd_conf(directory).splitlines()
    assert "ldap_id_use_start_tls = true" in lines
    assert not [line for line in lines if line.startswith(("ldap_default_bind_dn", "ldap_tls_cacert"))]
    assert {v["name"] for v in sssd.sssd_volumes(directory)} == {"sssd-client", "sssd-pipes", "sssd-mc", "sssd-db"}
    env = {e["name"] for e in sssd.sssd_container(cluster, directory)["env"]}
    assert env == {"SSSD_CONF", "SSSD_CLIENT_DIR"}


def test_sshd_takes_directory_passwords_and_keys() -> None:
    lines = render_sshd_config(_cluster(**DIRECTORY)).splitlines()
    assert "PasswordAuthentication yes" in lines and "KbdInteractiveAuthentication no" in lines
    assert f"AuthorizedKeysCommand {sssd.AUTHORIZED_KEYS_COMMAND} %u" in lines
    assert "AuthorizedKeysCommandUser nobody" in lines
    assert "PermitRootLogin prohibit-password" in lines, "root still never logs in with a password"


def test_a_directory_keeps_every_component_at_its_pod_security_level() -> None:
    """The sidecar adds only baseline's capabilities, as root, and emptyDir, Secret and ConfigMap volumes: slurmctld's
    pod stays "baseline" (docs/pod-security.md), and no other pod's level changes."""
    cluster = _cluster(**DIRECTORY)
    found: dict[str, set[str]] = {}
    for obj in desired_objects(Inputs.offline(cluster)):
        spec = obj.get("spec") or {}
        template = (spec.get("jobTemplate") or {}).get("spec", spec).get("template")
        if template:
            component = obj["metadata"]["labels"]["app.kubernetes.io/component"]
            found.setdefault(component, set()).add(level(template["spec"]))
    assert found == {component: {lvl} for component, lvl in LEVELS.items() if component in found}
    assert found["controller"] == {"baseline"}
