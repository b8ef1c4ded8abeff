"""hack/node.sh routes the Service network that hack/control-plane.sh hands ClusterIPs from (the e2e pods tests run
both; this catches the two drifting apart without a node)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_the_node_routes_the_control_planes_service_network() -> None:
    control_plane = (REPO / "hack" / "control-plane.sh").read_text()
    node = (REPO / "hack" / "node.sh").read_text()
    found = re.search(r"--service-cluster-ip-range (\S+)", control_plane)
    assert found, "hack/control-plane.sh names no --service-cluster-ip-range"
    assert re.search(rf"^SERVICE_NETWORK={re.escape(found.group(1))}$", node, re.M), found.group(1)
