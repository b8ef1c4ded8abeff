"""Observations for plan tests: a loaded cluster as the cache would hold it after its cluster component's first pass
(SpecValid at its generation), and an observation of it with the key Secrets present and the jail populated."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from slurmctl.api.v1 import API_VERSION, KIND, SPEC_VALID, Policy
from slurmctl.reconcilers.loading import Loaded, Loader
from slurmctl.reconcilers.observation import Observation, key_secrets
from test.unit.reconcilers.env import NAME, NS, spec

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
KEYS = {name: f"{name}-uid" for name in key_secrets(NAME)}


def loaded(size: int = 2, *, policy: Policy | None = None, **extra: Any) -> Loaded:
    obj = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": NAME, "namespace": NS, "uid": "cluster-uid", "generation": 1, "resourceVersion": "1"},
        "spec": spec(size=size, **extra),
        "status": {
            "conditions": [
                {
                    "type": SPEC_VALID,
                    "status": "True",
                    "observedGeneration": 1,
                    "lastTransitionTime": "2026-12-01T00:00:00Z",
                    "reason": "Valid",
                    "message": "",
                }
            ]
        },
    }
    found = Loader(policy=policy or Policy(allow_root_logins=True)).load(obj)
    assert isinstance(found, Loaded), found
    return found


def observe(cluster: Loaded, **facts: Any) -> Observation:
    base = Observation(cluster, NOW, cluster.obj["status"], keys=KEYS, jail_open=True)
    return dataclasses.replace(base, **facts)
