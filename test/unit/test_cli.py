"""The console script's user-facing surface."""

from __future__ import annotations

import http.server
import json
import logging
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from slurmctl import __version__
from slurmctl.api.v1 import Policy
from slurmctl.cli import _parser, default_workers, main, manager_options
from slurmctl.flags import policy_of
from slurmctl.runtime.server import disabled, split_address
from slurmctl.slurm import DEFAULT_MAX_ANSWER_BYTES


def test_version_flag_prints_the_package_version() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "slurmctl.cli", "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"slurmctl {__version__}"


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "run" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("address", "expected"),
    [(":8080", ("0.0.0.0", 8080)), ("127.0.0.1:9000", ("127.0.0.1", 9000))],
)
def test_bind_addresses_are_parsed_like_kubebuilder_flags(address: str, expected: tuple[str, int]) -> None:
    assert split_address(address) == expected
    assert disabled("0") and not disabled(address)


def test_run_defaults_match_kubebuilder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    opts = manager_options(_parser().parse_args(["run"]))
    assert (opts.metrics_bind_address, opts.health_probe_bind_address) == (":8080", ":8081")
    assert opts.leader_election is None
    assert opts.namespace is None
    assert 2 <= opts.max_concurrent_reconciles == default_workers() <= 8
    assert opts.grace_period == 30


def test_run_flags_build_the_manager_options() -> None:
    args = _parser().parse_args(
        ["run", "--leader-elect", "--leader-election-namespace", "ops", "--leader-election-id", "lock",
         "--namespace", "team-a", "--max-concurrent-reconciles", "4", "--metrics-bind-address", "0",
         "--log-format", "json", "--log-level", "DEBUG", "--graceful-shutdown-timeout", "5"]
    )  # fmt: skip
    opts = manager_options(args)
    assert opts.leader_election is not None
    assert (opts.leader_election.namespace, opts.leader_election.name) == ("ops", "lock")
    assert (opts.leader_election.lease_duration, opts.leader_election.renew_deadline) == (15, 10)
    assert opts.leader_election.retry_period == 2
    assert (opts.namespace, opts.max_concurrent_reconciles, opts.grace_period) == ("team-a", 4, 5)
    assert opts.metrics_bind_address == "0"
    assert (args.log_format, args.log_level) == ("json", "debug")


def test_environment_variables_stand_in_for_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURMCTL_LEADER_ELECT", "true")
    monkeypatch.setenv("SLURMCTL_LEADER_ELECTION_NAMESPACE", "ops")
    monkeypatch.setenv("SLURMCTL_NAMESPACE", "team-b")
    monkeypatch.setenv("SLURMCTL_MAX_CONCURRENT_RECONCILES", "3")
    monkeypatch.setenv("KUBECONFIG", "/tmp/kc")
    args = _parser().parse_args(["run"])
    opts = manager_options(args)
    assert opts.leader_election is not None and opts.leader_election.namespace == "ops"
    assert (opts.namespace, opts.max_concurrent_reconciles, args.kubeconfig) == ("team-b", 3, "/tmp/kc")
    # A flag beats its environment variable.
    assert _parser().parse_args(["run", "--namespace", "x"]).namespace == ("x",)


@pytest.mark.parametrize(
    ("argv", "elected"),
    [([], False), (["--leader-elect"], True), (["--leader-elect=true"], True), (["--leader-elect=false"], False),
     (["--leader-elect=False"], False), (["--leader-elect", "false"], False), (["--leader-elect=1"], True)],
)  # fmt: skip
def test_leader_elect_takes_the_go_operators_spellings(argv: list[str], elected: bool) -> None:
    opts = manager_options(_parser().parse_args(["run", *argv, "--namespace", "x"]))
    assert (opts.leader_election is not None) is elected


def test_leader_elect_false_beats_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURMCTL_LEADER_ELECT", "true")
    assert manager_options(_parser().parse_args(["run", "--leader-elect=false"])).leader_election is None


def test_bad_flag_values_are_rejected_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        _parser().parse_args(["run", "--max-concurrent-reconciles", "0"])
    assert exit_.value.code == 2
    assert "must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _parser().parse_args(["run", "--leader-elect=maybe"])
    assert "expected true or false, got 'maybe'" in capsys.readouterr().err


def test_run_without_usable_credentials_fails_with_a_message_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        assert main(["run", "--kubeconfig", str(tmp_path / "missing")]) == 2
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    err = capsys.readouterr().err
    assert "cannot load cluster credentials" in err
    assert "Traceback" not in err


def test_render_prints_the_manifests_of_a_sample(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "-f", "config/samples/slurmcluster_minimal.yaml", "-n", "hpc"]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("StatefulSet", "minimal-worker-cpu") in names
    assert ("ConfigMap", "minimal-slurm-configs") in names
    assert all(o["metadata"]["namespace"] == "hpc" for o in objects)
    assert not any(o["kind"] == "Secret" and o["metadata"]["name"] == "minimal-munge" for o in objects)


def test_render_reports_every_invalid_field_and_prints_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: slurm.slurmctl.io/v1\nkind: SlurmCluster\nmetadata: {name: bad}\nspec:\n"
        "  jail: {volume: {claimName: j}}\n  workers: [{name: cpu, size: 1}, {name: cpu, size: 2}]\n"
        "  partitions: [{name: main, workers: [gpu2], default: true}]\n"
    )
    assert main(["render", "-f", str(bad)]) == 1
    captured = capsys.readouterr()
    assert 'spec.partitions[0].workers[0]: unknown worker group "gpu2"' in captured.err
    assert "spec.workers[1]" in captured.err
    assert captured.out.strip() in ("", "[]")


def test_login_ssh_from_takes_networks_and_refuses_host_bits() -> None:
    assert _parser().parse_args(["run"]).login_ssh_from == ()
    parsed = _parser().parse_args(["run", "--login-ssh-from", "10.1.0.0/16, fd00::/8"])
    assert parsed.login_ssh_from == ("10.1.0.0/16", "fd00::/8")
    with pytest.raises(SystemExit):
        _parser().parse_args(["run", "--login-ssh-from", "10.1.2.3/16"])  # host bits: a typo, not a network


def test_watch_namespace_takes_a_list_and_the_namespaced_rbac_matches_it(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["run", "--watch-namespace", "team-a,team-b"])
    opts = manager_options(args)
    assert (opts.namespace, opts.namespaces) == (None, ("team-a", "team-b"))
    single = manager_options(_parser().parse_args(["run", "--watch-namespace=team-a"]))
    assert (single.namespace, single.namespaces) == ("team-a", ())
    assert main(["rbac", "--watch-namespace", "team-a,team-b"]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [(o["kind"], o["metadata"].get("namespace")) for o in objects] == [
        ("Role", "team-a"),
        ("RoleBinding", "team-a"),
        ("Role", "team-b"),
        ("RoleBinding", "team-b"),
        ("ClusterRole", None),  # reading Nodes, which no Role can grant
        ("ClusterRoleBinding", None),
    ]
    # The admin's opt-ins: every namespace (--watch-namespace=) and cordoning nodes.
    assert main(["rbac", "--watch-namespace=", "--allow-node-cordon"]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("ClusterRole", "slurmctl-operator"),
        ("ClusterRoleBinding", "slurmctl-operator"),
        ("ClusterRole", "slurmctl-operator-cluster-scoped"),
        ("ClusterRoleBinding", "slurmctl-operator-cluster-scoped"),
        ("ClusterRole", "slurmctl-operator-node-cordon"),
        ("ClusterRoleBinding", "slurmctl-operator-node-cordon"),
    ]
    with pytest.raises(SystemExit):
        _parser().parse_args(["run", "--watch-namespace", "Not_A_Namespace"])


def test_host_path_volumes_are_refused_unless_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = {
        "apiVersion": "slurm.slurmctl.io/v1",
        "kind": "SlurmCluster",
        "metadata": {"name": "hp"},
        "spec": {
            "jail": {"volume": {"source": {"hostPath": {"path": "/"}}}},
            "workers": [{"name": "cpu", "size": 1}],
        },
    }
    path = tmp_path / "hp.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["render", "-f", str(path)]) == 1
    err = capsys.readouterr().err
    assert "spec.jail.volume.source.hostPath: hostPath volumes are refused" in err and "--allow-host-path" in err
    assert main(["render", "-f", str(path), "--allow-host-path"]) == 0
    assert not _parser().parse_args(["run"]).allow_host_path
    assert _parser().parse_args(["run", "--allow-host-path"]).allow_host_path


def test_resync_period_is_off_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURMCTL_RESYNC_PERIOD", raising=False)
    assert manager_options(_parser().parse_args(["run"])).resync_period is None
    assert manager_options(_parser().parse_args(["run", "--resync-period", "5"])).resync_period == 5.0
    monkeypatch.setenv("SLURMCTL_RESYNC_PERIOD", "7")
    assert manager_options(_parser().parse_args(["run"])).resync_period == 7.0


def test_node_lost_after_is_60_seconds_unless_asked_for(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SLURMCTL_NODE_LOST_AFTER", raising=False)
    assert _parser().parse_args(["run"]).node_lost_after == 60.0
    assert _parser().parse_args(["run", "--node-lost-after", "15"]).node_lost_after == 15.0
    assert _parser().parse_args(["run", "--node-lost-after=0"]).node_lost_after == 0.0, "0: never"
    monkeypatch.setenv("SLURMCTL_NODE_LOST_AFTER", "20")
    assert _parser().parse_args(["run"]).node_lost_after == 20.0
    for bad in ("-1", "soon", "nan"):
        with pytest.raises(SystemExit):
            _parser().parse_args(["run", "--node-lost-after", bad])
        assert "seconds" in capsys.readouterr().err


def test_slurm_max_answer_size_is_256_mib_unless_asked_for(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SLURMCTL_SLURM_MAX_ANSWER_SIZE", raising=False)
    assert _parser().parse_args(["run"]).slurm_max_answer_size == 256 * 1024**2 == DEFAULT_MAX_ANSWER_BYTES
    for text, size in (("512Mi", 512 * 1024**2), ("1Gi", 1024**3), ("64Ki", 65536), ("1000000", 1_000_000)):
        assert _parser().parse_args(["run", f"--slurm-max-answer-size={text}"]).slurm_max_answer_size == size
    monkeypatch.setenv("SLURMCTL_SLURM_MAX_ANSWER_SIZE", "300Mi")
    assert _parser().parse_args(["run"]).slurm_max_answer_size == 300 * 1024**2
    assert _parser().parse_args(["run", "--slurm-max-answer-size=1.5Gi"]).slurm_max_answer_size == 3 * 512 * 1024**2
    for bad in ("0", "-1Mi", "1.5", "0.1Ki", "256MB", "big", ""):
        with pytest.raises(SystemExit):
            _parser().parse_args(["run", f"--slurm-max-answer-size={bad}"])
        assert "expected a size such as 256Mi" in capsys.readouterr().err


POLICY_ENV = (
    "ALLOW_HOST_PATH", "ALLOW_CONTROL_PLANE_NODES", "ALLOW_ROOT_LOGINS", "ALLOW_ROOT_JOBS", "ALLOW_PRIVILEGED_JOBS",
    "ALLOW_NODE_CORDON", "ALLOWED_IMAGES", "ALLOWED_SLURM_KEYS", "ALLOWED_SLURM_PROGRAMS", "ALLOWED_VOLUME_SOURCES",
)  # fmt: skip


def test_the_policy_flags_default_to_the_closed_policy_and_each_opens_one_door(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in POLICY_ENV:
        monkeypatch.delenv(f"SLURMCTL_{name}", raising=False)
    assert policy_of(_parser().parse_args(["run"])) == Policy()
    args = _parser().parse_args(
        ["run", "--allowed-images", "reg.example/a/, reg.example/b/", "--allowed-slurm-keys=Prolog,TaskPlugin",
         "--allowed-slurm-programs=Epilog", "--allowed-volume-sources=nfs", "--allow-host-path",
         "--allow-control-plane-nodes", "--allow-root-logins", "--allow-root-jobs=true", "--allow-privileged-jobs"]
    )  # fmt: skip
    assert policy_of(args) == Policy(
        allow_host_path=True,
        allowed_images=("reg.example/a/", "reg.example/b/"),
        allowed_slurm_keys=frozenset({"Prolog", "TaskPlugin", "Epilog"}),  # the older flag adds to the list
        allowed_volume_sources=frozenset({"nfs"}),
        allow_control_plane_nodes=True,
        allow_root_logins=True,
        allow_root_jobs=True,
        allow_privileged_jobs=True,
    )
    monkeypatch.setenv("SLURMCTL_ALLOWED_VOLUME_SOURCES", "secret")
    monkeypatch.setenv("SLURMCTL_ALLOW_ROOT_JOBS", "true")
    monkeypatch.setenv("SLURMCTL_ALLOW_PRIVILEGED_JOBS", "yes")
    env = policy_of(_parser().parse_args(["run"]))
    assert env.allowed_volume_sources == {"secret"} and env.allow_root_jobs and env.allow_privileged_jobs
    assert not policy_of(_parser().parse_args(["run", "--allow-privileged-jobs=false"])).allow_privileged_jobs
    assert policy_of(_parser().parse_args(["render", "-f", "-"])) == Policy(), "render reads flags only"


@pytest.mark.parametrize("given", ["ghcr.io/slurmctl", "reg.example/a/,reg.example/b"])
def test_an_image_prefix_without_a_trailing_slash_is_refused_naming_the_flag_and_the_value(
    given: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ghcr.io/slurmctl` would admit `ghcr.io/slurmctl-evil/x`."""
    bad = given.rsplit(",", 1)[-1]
    with pytest.raises(SystemExit):
        _parser().parse_args(["run", f"--allowed-images={given}"])
    err = capsys.readouterr().err
    assert "argument --allowed-images:" in err and f"{bad!r} must end with '/'" in err, err
    monkeypatch.setenv("SLURMCTL_ALLOWED_IMAGES", given)
    with pytest.raises(SystemExit):
        _parser().parse_args(["run"])
    assert "argument --allowed-images:" in capsys.readouterr().err


def test_render_refuses_what_the_operator_refuses_and_takes_the_same_opt_ins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = {
        "apiVersion": "slurm.slurmctl.io/v1",
        "kind": "SlurmCluster",
        "metadata": {"name": "p"},
        "spec": {
            "jail": {"volume": {"claimName": "jail"}},
            "workers": [{"name": "cpu", "size": 1, "tolerations": [{"operator": "Exists"}]}],
            "login": {"sshRootPublicKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyForTests test@example"]},
            "slurm": {"extraConfig": "TaskPlugin=task/none\n"},
        },
    }
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["render", "-f", str(path)]) == 1
    err = capsys.readouterr().err
    for field in ("spec.workers[0].tolerations[0]", "spec.login.sshRootPublicKeys", "spec.slurm.extraConfig"):
        assert f"SlurmCluster p: {field}: " in err, err
    opt_ins = ["--allow-control-plane-nodes", "--allow-root-logins", "--allowed-slurm-keys=TaskPlugin"]
    assert main(["render", "-f", str(path), *opt_ins]) == 0
    rendered = list(yaml.safe_load_all(capsys.readouterr().out))
    (configs,) = [o for o in rendered if o["metadata"]["name"] == "p-slurm-configs"]
    assert "DisableRootJobs=YES" in configs["data"]["slurm.conf"].splitlines()
    chroot = "required /usr/lib/slurmctl/chroot.so jail=/mnt/jail"
    assert configs["data"]["plugstack.conf"].splitlines()[1] == chroot
    assert main(["render", "-f", str(path), *opt_ins, "--allow-root-jobs", "--allow-privileged-jobs"]) == 0
    rendered = list(yaml.safe_load_all(capsys.readouterr().out))
    (configs,) = [o for o in rendered if o["metadata"]["name"] == "p-slurm-configs"]
    assert "DisableRootJobs" not in configs["data"]["slurm.conf"]
    assert configs["data"]["plugstack.conf"].splitlines()[1] == chroot
    (workers,) = [o for o in rendered if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "p-worker-cpu"]
    (slurmd,) = [c for c in workers["spec"]["template"]["spec"]["containers"] if c["name"] == "slurmd"]
    assert {"name": "SLURMCTL_PRIVILEGED_JOBS", "value": "yes"} in slurmd["env"]


def test_cluster_domain_is_cluster_local_unless_asked_for_and_reaches_the_rendered_pods(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SLURMCTL_CLUSTER_DOMAIN", raising=False)
    assert _parser().parse_args(["run"]).cluster_domain == "cluster.local"
    assert _parser().parse_args(["run", "--cluster-domain", "corp.example."]).cluster_domain == "corp.example"
    monkeypatch.setenv("SLURMCTL_CLUSTER_DOMAIN", "k8s.internal")
    assert _parser().parse_args(["run"]).cluster_domain == "k8s.internal"
    for bad in ("Cluster.Local", "a..b", "-x.local", ""):
        with pytest.raises(SystemExit):
            _parser().parse_args(["run", f"--cluster-domain={bad}"])
        assert "expected a DNS domain" in capsys.readouterr().err

    assert main(["render", "-f", "config/samples/slurmcluster_minimal.yaml", "-n", "hpc"]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    workers = next(o for o in objects if o["metadata"]["name"] == "minimal-worker-cpu")
    assert workers["spec"]["template"]["spec"]["dnsConfig"] == {"searches": ["minimal-workers.hpc.svc.k8s.internal"]}


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("SLURMCTL_CLUSTER_DOMAIN", "Bad.Domain", "expected a DNS domain"),
        ("SLURMCTL_MAX_CONCURRENT_RECONCILES", "0", "must be at least 1"),
        ("SLURMCTL_NODE_LOST_AFTER", "soon", "seconds"),
    ],
)
def test_a_bad_environment_value_is_refused_like_a_bad_flag_not_with_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str, value: str, said: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as exit_:
        _parser().parse_args(["run"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err


@pytest.mark.timeout(60)
def test_run_against_an_older_api_server_exits_with_one_error_line_not_a_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The version is the first thing asked: nothing else is requested from a server the operator refuses."""
    paths: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            paths.append(self.path)
            found = self.path == "/version"
            body = json.dumps({"major": "1", "minor": "31", "gitVersion": "v1.31.4"} if found else {}).encode()
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        status = main(
            ["run", "--kubeconfig", str(kubeconfig), "--metrics-bind-address=0", "--health-probe-bind-address=0"]
        )
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        server.shutdown()
        server.server_close()
        thread.join()
    assert status == 1
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if " ERROR " in line]
    assert len(errors) == 1, err
    assert errors[0].endswith(
        "ERROR slurmctl.runtime.version the API server is older than slurmctl supports "
        "kubernetes_version=v1.31.4 minimum=v1.32"
    )
    assert "Traceback" not in err
    assert paths == ["/version"]
