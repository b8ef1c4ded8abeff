"""The sshd of the login nodes (and of the workers with spec.login.sshToJobNodes): what a session may not do."""

from __future__ import annotations

from slurmctl.render.sshd import render_sshd_config
from test.unit.render.samples import sample


def test_a_login_session_forwards_nothing() -> None:
    """DisableForwarding (OpenSSH 8.4 on) refuses TCP, agent, X11 and Unix-socket forwarding, so a jail user cannot
    tunnel through the login pod to the API server or slurmrestd; the older keys stay for what reads them alone."""
    for name in ("minimal", "research"):
        lines = render_sshd_config(sample(name)).splitlines()
        assert {"DisableForwarding yes", "X11Forwarding no", "PermitTunnel no"} <= set(lines)
        assert not [line for line in lines if line.startswith(("AllowTcpForwarding", "AllowAgentForwarding"))]
