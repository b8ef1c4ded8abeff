"""slurmrestd and JWT authentication as rendered: what slurmrestd runs with, who holds the JWT key, and what
slurm.conf and slurmdbd.conf tell the daemons."""

from __future__ import annotations

from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render import accounting
from slurmctl.render.rest import SLURMRESTD_UID
from slurmctl.render.slurm_conf import MAX_TOKEN_LIFESPAN_SECONDS, render_slurm_conf
from slurmctl.slurm.token import DEFAULT_LIFETIME
from test.unit.render.samples import DBD_PASSWORD, manifests, sample, sample_doc

# AuthAltParameters' options are comma-separated; install_jwt_key (images/scripts/lib.sh) finds jwt_key= among them.
JWT_LINES = ["AuthAltTypes=auth/jwt", "AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key,max_token_lifespan=86400"]


def _obj(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def _pod(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    pod: dict[str, Any] = _obj(objects, kind, name)["spec"]["template"]["spec"]
    return pod


def test_slurmrestd_takes_jwts_only_and_loads_slurmdbds_api_only_with_accounting() -> None:
    minimal = _pod(manifests(sample("minimal")), "Deployment", "minimal-rest")
    research = _pod(manifests(sample("research")), "Deployment", "research-rest")
    (restd,) = minimal["containers"]
    assert restd["args"] == ["-a", "rest_auth/jwt", "-s", "openapi/slurmctld", "0.0.0.0:6820"]
    assert research["containers"][0]["args"][3] == "openapi/slurmctld,openapi/slurmdbd"
    assert {"name": "SLURM_JWT", "value": "daemon"} in restd["env"]
    assert restd["ports"] == [{"name": "http", "containerPort": 6820, "protocol": "TCP"}]


def test_slurmrestd_runs_unprivileged_without_munge_or_any_key() -> None:
    pod = _pod(manifests(sample("minimal")), "Deployment", "minimal-rest")
    (restd,) = pod["containers"]  # no munge sidecar: SLURM_JWT=daemon speaks auth/jwt only
    ctx = restd["securityContext"]
    assert (ctx["runAsUser"], ctx["runAsNonRoot"], ctx["readOnlyRootFilesystem"]) == (SLURMRESTD_UID, True, True)
    assert SLURMRESTD_UID not in (0, 64030)  # neither root nor SlurmUser (slurmrestd refuses SlurmUser)
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert pod["volumes"] == [{"name": "slurm-configs", "configMap": {"name": "minimal-slurm-configs"}}]
    assert pod["automountServiceAccountToken"] is False


def test_readiness_asks_slurmrestd_itself_over_http() -> None:
    (restd,) = _pod(manifests(sample("minimal")), "Deployment", "minimal-rest")["containers"]
    probe = restd["readinessProbe"]["httpGet"]
    assert (probe["path"], probe["port"]) == ("/openapi/v3", "http")
    assert {h["name"] for h in probe["httpHeaders"]} == {"X-SLURM-USER-NAME", "X-SLURM-USER-TOKEN"}


def test_the_service_is_named_after_the_cluster_on_port_6820() -> None:
    svc = _obj(manifests(sample("minimal")), "Service", "minimal-rest")
    assert svc["spec"]["ports"] == [{"name": "http", "port": 6820, "targetPort": 6820, "protocol": "TCP"}]
    assert svc["spec"]["selector"] == {"app.kubernetes.io/instance": "minimal", "app.kubernetes.io/component": "rest"}


def test_disabled_rest_renders_nothing() -> None:
    cluster = sample("minimal")
    cluster.spec.rest.enabled = False
    assert not [o for o in manifests(cluster) if o["metadata"]["name"] == "minimal-rest"]


def test_slurmctld_and_slurmdbd_verify_jwts_with_the_key_and_only_they_mount_it() -> None:
    cluster = sample("research")
    conf = render_slurm_conf(cluster).splitlines()
    dbd = accounting.render_slurmdbd_conf(cluster, dbd_password=DBD_PASSWORD).splitlines()
    assert all(line in conf and line in dbd for line in JWT_LINES)
    objects = manifests(cluster)
    holders = sorted(
        f"{o['kind']}/{o['metadata']['name']}"
        for o in objects
        if o["kind"] in ("StatefulSet", "Deployment")
        for v in o["spec"]["template"]["spec"].get("volumes", [])
        if v.get("secret", {}).get("secretName") == "research-jwt-key"
    )
    assert holders == ["Deployment/research-accounting", "StatefulSet/research-controller"]


def test_a_user_gets_a_token_for_a_day_at_most() -> None:
    """`scontrol token lifespan=31536000` by a user is refused (Slurm exempts SlurmUser); the operator's own tokens
    (slurm/token.py, minted with the key) are far shorter."""
    conf = render_slurm_conf(sample("minimal")).splitlines()
    (line,) = [line for line in conf if line.startswith("AuthAltParameters=")]
    options = dict(option.partition("=")[::2] for option in line.split("=", 1)[1].split(","))
    assert options["max_token_lifespan"] == str(MAX_TOKEN_LIFESPAN_SECONDS) == "86400"
    assert DEFAULT_LIFETIME.total_seconds() < MAX_TOKEN_LIFESPAN_SECONDS


def test_a_new_jwt_key_rolls_slurmctld_and_slurmdbd_but_not_slurmrestd() -> None:
    cluster = sample("research")

    def hashes(jwt_key_id: str) -> dict[str, str]:
        objects = manifests(cluster, jwt_key_id=jwt_key_id)
        return {
            f"{o['kind']}/{o['metadata']['name']}": o["spec"]["template"]["metadata"]["annotations"][
                "slurm.slurmctl.io/config-hash"
            ]
            for o in objects
            if o["kind"] in ("StatefulSet", "Deployment")
        }

    before, after = hashes("old-uid"), hashes("new-uid")
    changed = sorted(k for k in before if before[k] != after[k])
    assert changed == ["Deployment/research-accounting", "StatefulSet/research-controller"]


def test_slurmrestd_leaves_a_node_that_stopped_answering_after_30s_not_300s() -> None:
    """The operator asks Slurm nothing while slurmrestd is unreachable (it fails closed), so a lost node's workers wait
    for slurmrestd to be evicted and started elsewhere: 30 s after the node's NoExecute taint, not the default 300 s."""
    pod = _pod(manifests(sample("minimal")), "Deployment", "minimal-rest")
    assert {(t["key"], t["effect"], t["tolerationSeconds"]) for t in pod["tolerations"]} == {
        ("node.kubernetes.io/not-ready", "NoExecute", 30),
        ("node.kubernetes.io/unreachable", "NoExecute", 30),
    }


def test_a_users_toleration_of_a_lost_node_taint_replaces_ours_for_that_key() -> None:
    doc = sample_doc("minimal")
    theirs = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}  # forever
    extra = {"key": "dedicated", "operator": "Equal", "value": "slurm", "effect": "NoSchedule"}
    doc["spec"].setdefault("rest", {})["tolerations"] = [theirs, extra]
    pod = _pod(manifests(SlurmCluster.model_validate(doc)), "Deployment", "minimal-rest")
    assert pod["tolerations"][:2] == [theirs, extra]
    assert [t["key"] for t in pod["tolerations"][2:]] == ["node.kubernetes.io/not-ready"]
