"""What a test's node id says about where it belongs: its module, and the Kubernetes minor it runs on.

`make test` runs each control-plane test once per Kubernetes minor it covers (test/e2e/conftest.py parametrizes them
with `kube<minor>`, e.g. `test/e2e/test_api_crd.py::test_x[kube1.32]`). Each minor's run of a module is a unit of its
own: xdist hands it out on its own (the two need not share a worker) and the timing table gives it its own row. Plain
modules, not a plugin: test/conftest.py and test.timing both read it, and test.timing must be imported first as the
plugin it is (assertion rewriting).
"""

from __future__ import annotations

import re

KUBE_ID = "kube"  # the id prefix of the minor a parametrized control-plane test runs on: kube1.32
_KUBE = re.compile(rf"[\[-]({KUBE_ID}\d+\.\d+)[\]-]")


def kube_id(minor: str) -> str:
    """The id of `minor` ("1.32") in a test's parameters."""
    return f"{KUBE_ID}{minor}"


def module_of(nodeid: str) -> str:
    """The module part of a test's node id (its path relative to the rootdir, the repository for the suite), with the
    minor it runs on when it runs on several: `test/e2e/test_api_crd.py [kube1.32]`."""
    module, _, rest = nodeid.partition("::")
    found = _KUBE.search(rest)
    return f"{module} [{found.group(1)}]" if found else module
