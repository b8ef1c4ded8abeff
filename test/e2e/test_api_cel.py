"""The API server's own cross-field checks on a real API server: every row of test/api_rules.py (a CEL rule, the
keys of a named list, a list-set, a schema bound) refused with a 422 whose cause names the field and says why, on
create and on update, while specs that keep every rule are stored, and an object stored before the rules existed
still takes the operator's status updates. The operator's agreement with each refusal is test/unit/api/test_cel.py."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from slurmctl.api.v1 import GROUP, PLURAL, VERSION, crd
from test.api_rules import CASES, RICH_VALID_SPEC, VALID_SPEC
from test.e2e.harness import ControlPlane, eventually

pytestmark = pytest.mark.e2e
TIMEOUT = 10


def _body(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SlurmCluster", "metadata": {"name": name}, "spec": spec}


def _causes(exc: ApiException) -> list[tuple[str, str]]:
    """(field, message) of each cause in the API server's Status."""
    details = json.loads(exc.body or "{}").get("details") or {}
    return [(cause.get("field", ""), cause.get("message", "")) for cause in details.get("causes") or []]


def _min_over_max(exc: ApiException) -> bool:
    """The refusal names the elastic group's min with the rule's message (1.32 puts `"object": ` before it)."""
    return any(
        f == "spec.workers[0].autoscale.min" and m.startswith("Invalid value: ") and m.endswith("min is more than max")
        for f, m in _causes(exc)
    )


async def test_every_rule_refuses_its_spec_naming_the_field(
    installed: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    custom = client.CustomObjectsApi(api)
    failures = []
    for index, case in enumerate(CASES):
        try:
            await custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, _body(f"case-{index}", case.spec), _request_timeout=TIMEOUT
            )
        except ApiException as exc:
            causes = _causes(exc)
            if exc.status != 422 or not any(f == case.field and case.server_says in m for f, m in causes):
                failures.append(f"{case.name}: HTTP {exc.status}, not {case.field}: ...{case.server_says}...: {causes}")
        else:
            failures.append(f"{case.name}: accepted")
    assert failures == []
    stored = await custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _request_timeout=TIMEOUT)
    assert stored["items"] == []


async def test_specs_that_keep_every_rule_are_stored(
    installed: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    custom = client.CustomObjectsApi(api)
    for name, spec in (("plain", VALID_SPEC), ("rich", RICH_VALID_SPEC)):
        await custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, _body(name, spec), _request_timeout=TIMEOUT
        )
    stored = await custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "rich", _request_timeout=TIMEOUT
    )
    assert stored["spec"]["workers"][1]["autoscale"] == {"min": 4, "max": 4, "idleTime": "10m", "resumeTimeout": "5m"}


async def test_a_slurm_downgrade_is_refused_and_an_upgrade_taken(
    installed: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    """spec.slurm.version's transition rule: 24.11 (the default) to 26.05 is stored, back to 24.11 is refused."""
    custom = client.CustomObjectsApi(api)
    created = await custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, _body("line", VALID_SPEC), _request_timeout=TIMEOUT
    )
    assert created["spec"].get("slurm", {}).get("version", "24.11") == "24.11"
    update = copy.deepcopy(created)
    update["spec"].setdefault("slurm", {})["version"] = "26.05"
    upgraded = await custom.replace_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "line", update, _request_timeout=TIMEOUT
    )
    downgrade = copy.deepcopy(upgraded)
    downgrade["spec"]["slurm"]["version"] = "24.11"
    with pytest.raises(ApiException) as refused:
        await custom.replace_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "line", downgrade, _request_timeout=TIMEOUT
        )
    assert refused.value.status == 422
    causes = _causes(refused.value)
    assert any(f == "spec.slurm.version" and "a downgrade" in m for f, m in causes), causes


async def test_an_update_that_breaks_a_rule_is_refused_and_changes_nothing(
    installed: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    """The rules hold on every write, not only on create: lowering an elastic group's max below its min is refused."""
    custom = client.CustomObjectsApi(api)
    spec = {**VALID_SPEC, "workers": [{"name": "cpu", "autoscale": {"min": 2, "max": 4}}]}
    created = await custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, _body("elastic", spec), _request_timeout=TIMEOUT
    )
    update = copy.deepcopy(created)
    update["spec"]["workers"][0]["autoscale"]["max"] = 1
    with pytest.raises(ApiException) as refused:
        await custom.replace_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "elastic", update, _request_timeout=TIMEOUT
        )
    assert refused.value.status == 422
    assert _min_over_max(refused.value), _causes(refused.value)
    stored = await custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "elastic", _request_timeout=TIMEOUT
    )
    assert stored["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    # Within the rule, the same update goes through.
    update["spec"]["workers"][0]["autoscale"]["max"] = 2
    replaced = await custom.replace_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "elastic", update, _request_timeout=TIMEOUT
    )
    assert replaced["spec"]["workers"][0]["autoscale"]["max"] == 2


async def test_kubectl_apply_prints_the_field_and_the_message(installed: ControlPlane, namespace: str) -> None:
    """What a user sees: `kubectl apply` fails with the field and the message, client-side validation off so that
    the server has the last word."""
    case = next(case for case in CASES if case.name == "partition naming an unknown group")
    proc = installed.apply_unvalidated(_body("unknown-group", case.spec), namespace=namespace)
    assert proc.returncode != 0
    assert f"{case.field}: Invalid value" in proc.stderr and case.server_says in proc.stderr, proc.stderr


# A CRD of its own (the SlurmCluster schema under another group), so that replacing it leaves the session's alone.
SCRATCH_GROUP = "ratchet.slurmctl.io"
SCRATCH_PLURAL = "ratchets"
SCRATCH_CRD = f"{SCRATCH_PLURAL}.{SCRATCH_GROUP}"


def _scratch_crd(*, rules: bool) -> dict[str, Any]:
    manifest = crd()
    manifest["metadata"] = {"name": SCRATCH_CRD}
    manifest["spec"]["group"] = SCRATCH_GROUP
    manifest["spec"]["names"] = {
        "kind": "Ratchet",
        "listKind": "RatchetList",
        "plural": SCRATCH_PLURAL,
        "singular": "ratchet",
    }
    if not rules:

        def strip(node: Any) -> None:
            if isinstance(node, dict):
                node.pop("x-kubernetes-validations", None)
                for value in node.values():
                    strip(value)
            elif isinstance(node, list):
                for value in node:
                    strip(value)

        strip(manifest)
    return manifest


async def test_an_object_stored_before_the_rules_still_takes_status_and_unrelated_updates(
    control_plane: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    """A SlurmCluster that breaks a rule but was stored before the rule existed (an older CRD) must not lock the
    operator out: the API server ratchets, so a write that leaves the broken field as it was goes through (with a
    warning), the operator's status updates included, and only a write that changes that field must satisfy it."""
    custom = client.CustomObjectsApi(api)
    legacy_spec = {**VALID_SPEC, "workers": [{"name": "cpu", "autoscale": {"min": 5, "max": 3}}]}

    def body(name: str) -> dict[str, Any]:
        return {**_body(name, legacy_spec), "apiVersion": f"{SCRATCH_GROUP}/{VERSION}", "kind": "Ratchet"}

    async def create(name: str) -> dict[str, Any] | None:
        try:
            created: dict[str, Any] = await custom.create_namespaced_custom_object(
                SCRATCH_GROUP, VERSION, namespace, SCRATCH_PLURAL, body(name), _request_timeout=TIMEOUT
            )
        except ApiException as exc:
            if exc.status in (404, 422):  # the CRD not served yet / refused by its rules
                return None
            raise
        return created

    control_plane.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(_scratch_crd(rules=False)))
    try:
        await eventually(lambda: create("legacy"), timeout=30, what="the CRD without rules to take the object")
        control_plane.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(_scratch_crd(rules=True)))

        async def rules_in_force() -> bool:
            probe = await create("probe")
            if probe is None:
                return True
            await custom.delete_namespaced_custom_object(
                SCRATCH_GROUP, VERSION, namespace, SCRATCH_PLURAL, "probe", _request_timeout=TIMEOUT
            )
            return False

        await eventually(rules_in_force, timeout=30, what="the rules to refuse a new object")

        async def read() -> dict[str, Any]:
            found: dict[str, Any] = await custom.get_namespaced_custom_object(
                SCRATCH_GROUP, VERSION, namespace, SCRATCH_PLURAL, "legacy", _request_timeout=TIMEOUT
            )
            return found

        legacy = await read()
        legacy["status"] = {"phase": "Failed"}
        version = await client.VersionApi(api).get_code(_request_timeout=TIMEOUT)
        if (int(version.major), int("".join(ch for ch in version.minor if ch.isdigit()))) < (1, 33):
            # Before validation ratcheting went GA (1.33), 1.32 refuses even a status write of such an object
            # (docs/api-validation.md): all that test can show there is that refusal.
            with pytest.raises(ApiException) as refused:
                await custom.replace_namespaced_custom_object_status(
                    SCRATCH_GROUP, VERSION, namespace, SCRATCH_PLURAL, "legacy", legacy, _request_timeout=TIMEOUT
                )
            assert _min_over_max(refused.value), _causes(refused.value)
            return
        await custom.replace_namespaced_custom_object_status(
            SCRATCH_GROUP, VERSION, namespace, SCRATCH_PLURAL, "legacy", legacy, _request_timeout=TIMEOUT
        )
        legacy = await read()
        assert legacy["status"]["phase"] == "Failed"
        legacy["spec"]["login"]["size"] = 2
        await custom.replace_namespaced_custom_object(
            SCRATCH_GROUP, VERSION, namespace, SCRATCH_PLURAL, "legacy", legacy, _request_timeout=TIMEOUT
        )
        legacy = await read()
        legacy["spec"]["workers"][0]["autoscale"]["min"] = 6
        with pytest.raises(ApiException) as refused:
            await custom.replace_namespaced_custom_object(
                SCRATCH_GROUP, VERSION, namespace, SCRATCH_PLURAL, "legacy", legacy, _request_timeout=TIMEOUT
            )
        assert _min_over_max(refused.value), _causes(refused.value)
    finally:
        control_plane.kubectl("delete", "crd", SCRATCH_CRD, "--wait=false")
