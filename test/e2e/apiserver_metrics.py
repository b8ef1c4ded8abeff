"""Count requests as the API server itself saw them (`apiserver_request_total` on its `/metrics`).

The honest way to prove an operator sends no writes: snapshot before, act, snapshot after, compare.

    before = await request_counts(api)
    ...
    after = await request_counts(api)
    assert writes(before, after, resource="configmaps", verbs=PATCH_VERBS) == {}
"""

from __future__ import annotations

from collections import Counter

from kubernetes_asyncio.client import ApiClient
from prometheus_client.parser import text_string_to_metric_families

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION", "CREATE", "UPDATE"})
# Server-side apply is reported as APPLY by newer API servers and PATCH by older ones. Only the operator patches;
# the controller-manager also POSTs (e.g. `kube-root-ca.crt` into every new namespace), so an operator's apply
# traffic is best measured with these verbs.
PATCH_VERBS = frozenset({"PATCH", "APPLY"})

Counts = Counter[tuple[str, str]]


async def metrics_text(api: ApiClient) -> str:
    resp = await api.call_api(
        "/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False, _request_timeout=10
    )
    try:
        body = await resp.read()
        if resp.status != 200:
            raise AssertionError(f"GET /metrics: {resp.status} {body[:200]!r}")
        return body.decode()
    finally:
        resp.release()


async def request_counts(api: ApiClient) -> Counts:
    """apiserver_request_total summed by (verb, resource), subresources as `resource/subresource`."""
    counts: Counts = Counter()
    for family in text_string_to_metric_families(await metrics_text(api)):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if sample.name != "apiserver_request_total":
                continue
            labels = sample.labels
            resource = labels.get("resource", "")
            if labels.get("subresource"):
                resource += "/" + labels["subresource"]
            counts[(labels.get("verb", ""), resource)] += int(sample.value)
    return counts


def delta(before: Counts, after: Counts, *, resource: str | None = None) -> dict[tuple[str, str], int]:
    """Requests made between the two snapshots (only non-zero entries), optionally for one resource."""
    out = {}
    for key, value in after.items():
        if resource is not None and key[1] != resource:
            continue
        diff = value - before.get(key, 0)
        if diff:
            out[key] = diff
    return out


def writes(
    before: Counts, after: Counts, *, resource: str | None = None, verbs: frozenset[str] = WRITE_VERBS
) -> dict[str, int]:
    """Write requests (or requests with the given verbs) by verb between the two snapshots; `{}` means none."""
    found: Counter[str] = Counter()
    for (verb, _), count in delta(before, after, resource=resource).items():
        if verb in verbs:
            found[verb] += count
    return dict(found)
