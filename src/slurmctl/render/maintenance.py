"""The `maintenance` component's Job: puts Slurm's MAINT reservation over the next maintenance window (or removes it).

Why a Job. slurmrestd 24.11 (data_parser v0.0.42) can list reservations but not create, update or delete them (those
endpoints came with v0.0.43, Slurm 25.05), so the operator cannot make the reservation through its REST client.
Running `scontrol` in the controller's pod would need `pods/exec`, which lets its holder run anything as root in any
pod of the namespace. A Job needs nothing the operator does not already hold (it creates Jobs for the jail and the
benchmark): a short pod of the controller's image, a Slurm client like the NCCL benchmark's, with the Slurm configs
and the munge key, that starts munged, asks `scontrol` and ends. Its name carries a hash of what it asks for, so a
changed window is a new Job and an unchanged one is not run again.

The reservation, `slurmctl-maintenance`, covers the window open now or else the next one to open: `Flags=MAINT,
IGNORE_JOBS` over all nodes (`Nodes=ALL`), for root only. Slurm then starts no job whose time limit would run into the
window (MAINT also keeps its nodes out of accounting's utilisation), and IGNORE_JOBS lets the reservation be made while
jobs run. What the Job does is idempotent: a reservation of that name that already covers the window is kept (one
whose start has passed counts when its end matches); any other is deleted and made anew. Times are UTC (the
container's TZ), which is how Slurm parses and prints them there.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from slurmctl.api.v1 import SlurmCluster, Span
from slurmctl.render import meta, pods
from slurmctl.render.kinds import JOB

COMPONENT = "maintenance"
CONTAINER = "reservation"
RESERVATION = "slurmctl-maintenance"
# What the Job does, by version: a change here is a new Job name for every cluster (the script runs again, harmlessly).
_SCRIPT_VERSION = 1
ACTIVE_DEADLINE_SECONDS = 600
BACKOFF_LIMIT = 4
# scontrol waits this long for slurmctld (starting, or a standby taking over) before the Job gives up and is retried.
SLURMCTLD_WAIT_SECONDS = 240

# The script run in the Job's container. Each scontrol call has a deadline (timeout 30).
SCRIPT = r"""set -euo pipefail
. /usr/lib/slurmctl/lib.sh
install_slurm_configs
install_munge_key
munged_pid=$(start_munged background)
trap 'kill "$munged_pid" 2>/dev/null || true' EXIT
wait_for_munge
sc() { timeout 30 scontrol "$@"; }
deadline=$((SECONDS + SLURMCTLD_WAIT_SECONDS))
until out=$(sc ping 2>&1) && grep -q UP <<<"$out"; do
    [ "$SECONDS" -lt "$deadline" ] || die "slurmctld does not answer: $out"
    sleep 5
done
current=$(sc -o show reservation "$RESERVATION" 2>/dev/null) || current=''
if [ -z "$WINDOW_START" ]; then
    if [ -n "$current" ]; then
        sc delete reservation="$RESERVATION"
        log "removed reservation $RESERVATION: no maintenance window ahead"
    fi
    exit 0
fi
now=$(date -u +%s)
start=$(date -u -d "$WINDOW_START" +%s)
end=$(date -u -d "$WINDOW_END" +%s)
if [ -n "$current" ]; then
    has_start=$(sed -n 's/.*StartTime=\([^ ]*\).*/\1/p' <<<"$current")
    has_end=$(sed -n 's/.*EndTime=\([^ ]*\).*/\1/p' <<<"$current")
    has_start=$(date -u -d "$has_start" +%s 2>/dev/null || echo 0)
    has_end=$(date -u -d "$has_end" +%s 2>/dev/null || echo 0)
    if [ "$has_end" = "$end" ] && { [ "$has_start" = "$start" ] || [ "$start" -le "$now" ]; }; then
        log "reservation $RESERVATION already covers $WINDOW_START to $WINDOW_END"
        exit 0
    fi
    sc delete reservation="$RESERVATION"
    log "removed reservation $RESERVATION: it covered another window ($current)"
fi
if [ "$end" -le "$now" ]; then
    log "the window $WINDOW_START to $WINDOW_END is over: no reservation"
    exit 0
fi
from=now
[ "$start" -le "$now" ] || from=$(date -u -d "@$start" +%Y-%m-%dT%H:%M:%S)
sc create reservation reservationname="$RESERVATION" starttime="$from" \
    endtime="$(date -u -d "@$end" +%Y-%m-%dT%H:%M:%S)" nodes=ALL users=root flags=MAINT,IGNORE_JOBS
log "reservation $RESERVATION (MAINT, IGNORE_JOBS, all nodes) covers $WINDOW_START to $WINDOW_END"
sc -o show reservation "$RESERVATION"
"""


def _utc(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def reservation_job_name(c: str, window: Span | None) -> str:
    """The Job for this reservation (None: for removing it): named by what it asks for, so a new window is a new Job."""
    wanted = (_utc(window.start), _utc(window.end)) if window else ("", "")
    return f"{c}-maintenance-{meta.content_hash(_SCRIPT_VERSION, *wanted)[:10]}"


def render_reservation_job(cluster: SlurmCluster, window: Span | None) -> dict[str, Any]:
    """The Job that makes Slurm's MAINT reservation cover `window` (None: that removes it)."""
    c = meta.cluster_name(cluster)
    spec = cluster.spec
    env = {
        "TZ": "UTC",
        "RESERVATION": RESERVATION,
        "WINDOW_START": _utc(window.start) if window else "",
        "WINDOW_END": _utc(window.end) if window else "",
        "SLURMCTLD_WAIT_SECONDS": str(SLURMCTLD_WAIT_SECONDS),
    }
    container = {
        "name": CONTAINER,
        "image": spec.image_for("controller", spec.controller.image),
        "command": ["/usr/bin/tini", "--", "/bin/bash", "-c", SCRIPT],
        "env": [{"name": name, "value": value} for name, value in env.items()],
        "volumeMounts": pods.slurm_mounts(),
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        # Root to install the munge key and start munged (as munge); scontrol as root, a Slurm administrator.
        "securityContext": pods.root_then_drop(),
    }
    name = reservation_job_name(c, window)
    return {
        "apiVersion": JOB.api_version,
        "kind": "Job",
        "metadata": meta.object_meta(cluster, name, COMPONENT),
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            "activeDeadlineSeconds": ACTIVE_DEADLINE_SECONDS,
            "template": {
                "metadata": {"labels": meta.labels(c, COMPONENT)},
                "spec": {
                    "automountServiceAccountToken": False,
                    "restartPolicy": "Never",
                    "containers": [container],
                    "volumes": pods.slurm_volumes(c),
                    **pods.pod_settings(spec.controller, spec.slurm.image_pull_secrets),
                },
            },
        },
    }
