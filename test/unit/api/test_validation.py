"""Semantic validation: every problem the schema cannot see, reported with the path of the field at fault."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmctl.api.v1 import OPEN_POLICY, Policy, SlurmCluster, SlurmClusterSpec, check_cluster, validate_spec
from test.unit.api.helpers import apply_defaults, spec_schema


def cluster(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "jail": {"volume": {"claimName": "jail"}},
        "workers": [{"name": "cpu", "size": 2}, {"name": "gpu", "size": 2, "gpus": 8}],
    }
    return {
        "apiVersion": "slurm.slurmctl.io/v1",
        "kind": "SlurmCluster",
        "metadata": {"name": "demo", "namespace": "hpc"},
        "spec": {**base, **spec},
    }


def problems_of(obj: dict[str, Any]) -> list[str]:
    _, problems = check_cluster(obj, policy=OPEN_POLICY)
    return [str(p) for p in problems]


def test_valid_cluster_has_no_problems() -> None:
    assert problems_of(cluster()) == []


def test_partition_naming_an_unknown_group() -> None:
    obj = cluster(
        partitions=[
            {"name": "cpu", "workers": ["cpu"], "default": True},
            {"name": "gpu", "workers": ["gpu", "gpu2"]},
        ]
    )
    assert problems_of(obj) == ['spec.partitions[1].workers[1]: unknown worker group "gpu2"']


def test_duplicate_group_names() -> None:
    obj = cluster(workers=[{"name": "cpu"}, {"name": "gpu"}, {"name": "cpu"}])
    assert problems_of(obj) == ['spec.workers[2].name: duplicate worker group "cpu" (also spec.workers[0])']


def test_default_partition_missing() -> None:
    obj = cluster(partitions=[{"name": "a"}, {"name": "b"}])
    assert problems_of(obj) == ["spec.partitions: no partition has default: true (exactly one must)"]


def test_default_partition_doubled() -> None:
    obj = cluster(partitions=[{"name": "a", "default": True}, {"name": "b"}, {"name": "c", "default": True}])
    assert problems_of(obj) == ["spec.partitions[2].default: more than one default partition (also spec.partitions[0])"]


def test_duplicate_partitions_and_groups_listed_twice() -> None:
    obj = cluster(partitions=[{"name": "a", "default": True, "workers": ["cpu", "cpu"]}, {"name": "a"}])
    assert problems_of(obj) == [
        'spec.partitions[1].name: duplicate partition "a" (also spec.partitions[0])',
        'spec.partitions[0].workers[1]: worker group "cpu" is listed twice',
    ]


def test_partition_options_the_operator_sets_itself() -> None:
    obj = cluster(partitions=[{"name": "a", "default": True, "options": {"Nodes": "ALL", "max-time": "1"}}])
    assert problems_of(obj) == [
        "spec.partitions[0].options.Nodes: Nodes is set by slurmctl from name, workers and default",
        "spec.partitions[0].options.max-time: option names are letters and digits, as slurm.conf spells them "
        "(at most 64)",
    ]


def test_accounting_enabled_without_a_database() -> None:
    assert problems_of(cluster(accounting={"enabled": True})) == [
        "spec.accounting: accounting is enabled but neither external nor mariadb.enabled is set"
    ]
    assert problems_of(cluster(accounting={"enabled": True, "mariadb": {"enabled": False}})) != []
    assert problems_of(cluster(accounting={"enabled": True, "mariadb": {"enabled": True}})) == []
    assert problems_of(cluster(accounting={"enabled": False})) == []


def test_accounting_with_both_databases() -> None:
    external = {"host": "db", "user": "slurm", "passwordSecretRef": {"name": "db"}}
    obj = cluster(accounting={"enabled": True, "external": external, "mariadb": {"enabled": True}})
    assert problems_of(obj) == ["spec.accounting: set either external or mariadb.enabled, not both"]


def test_sizes_beyond_the_sane_maximum() -> None:
    per_group = cluster(workers=[{"name": "cpu", "size": 1001}])
    assert problems_of(per_group) == ["spec.workers[0].size: input should be less than or equal to 1000"]
    total = cluster(workers=[{"name": f"g{i}", "size": 1000} for i in range(17)])
    assert problems_of(total) == ["spec.workers: 17000 worker nodes in total exceed the maximum of 16384"]
    login = cluster(login={"size": 17})
    assert problems_of(login) == ["spec.login.size: input should be less than or equal to 16"]


def test_names_too_long_for_the_pod_names_built_from_them() -> None:
    long_group = cluster(workers=[{"name": "a" * 21}])
    assert problems_of(long_group) == ["spec.workers[0].name: string should have at most 20 characters"]
    obj = cluster()
    obj["metadata"]["name"] = "a" * 25
    assert problems_of(obj) == [
        f'metadata.name: "{"a" * 25}" must be a DNS label (lowercase letters, digits and hyphens, starting with '
        "a letter) of at most 24 characters"
    ]


def test_volumes_need_exactly_one_source() -> None:
    obj = cluster(
        jail={
            "volume": {"claimName": "a", "source": {"nfs": {"server": "s", "path": "/"}}},
            "subMounts": [
                {"name": "x", "mountPath": "/data", "volume": {}},
                {"name": "y", "mountPath": "/data", "volume": {"source": {"nfs": {}, "hostPath": {}}}},
                {"name": "x", "mountPath": "/", "volume": {"claimName": "c"}},
            ],
        }
    )
    assert problems_of(obj) == [
        "spec.jail.volume: set exactly one of claimName and source (got claimName, source)",
        'spec.jail.subMounts[2].name: duplicate sub-mount "x" (also spec.jail.subMounts[0])',
        "spec.jail.subMounts[0].volume: set exactly one of claimName and source (got neither)",
        "spec.jail.subMounts[1].volume.source: a volume source has exactly one key, e.g. nfs or hostPath",
        "spec.jail.subMounts[1].mountPath: /data is mounted twice (also spec.jail.subMounts[0])",
        "spec.jail.subMounts[2].mountPath: cannot mount over the jail's root",
    ]


def test_login_service_fields_that_need_another_type() -> None:
    obj = cluster(login={"service": {"type": "ClusterIP", "nodePort": 30022, "loadBalancerIP": "192.0.2.1"}})
    assert problems_of(obj) == [
        "spec.login.service.nodePort: needs type NodePort or LoadBalancer",
        "spec.login.service.loadBalancerIP: needs type LoadBalancer",
    ]


def test_nccl_benchmark_needs_gpus_and_ordered_sizes() -> None:
    obj = cluster(
        workers=[{"name": "cpu"}],
        healthChecks={"ncclBenchmark": {"enabled": True, "minBytes": "8Gi", "maxBytes": "512Mi"}},
    )
    assert problems_of(obj) == [
        "spec.healthChecks.ncclBenchmark.enabled: the NCCL benchmark needs a worker group with gpus > 0",
        "spec.healthChecks.ncclBenchmark.maxBytes: 512Mi is smaller than minBytes 8Gi",
    ]


def test_job_tmp_sizes_below_one_mebibyte() -> None:
    """A tmpfs of 0 bytes has no limit at all, and one of a few bytes holds no program's scratch."""
    obj = cluster(
        jail={"volume": {"claimName": "jail"}, "jobTmp": {"tmpSize": 0, "shmSize": "1Mi"}},
        workers=[{"name": "cpu", "jobTmp": {"shmSize": "1000k"}}],
    )
    assert problems_of(obj) == [
        "spec.jail.jobTmp.tmpSize: 0 is below the minimum of 1Mi",
        "spec.workers[0].jobTmp.shmSize: 1000k is below the minimum of 1Mi",
    ]


def test_schema_problems_are_reported_with_camel_case_paths() -> None:
    obj = cluster(workers=[{"name": "cpu", "sharedMemorySize": "lots", "size": "2"}], populateJail={"overwrite": 1})
    assert problems_of(obj) == [
        "spec.populateJail.overwrite: input should be a valid boolean",
        "spec.workers[0].sharedMemorySize: value error, 'lots' is not a Kubernetes quantity (e.g. 500m, 64Gi, 4)",
        "spec.workers[0].size: input should be a valid integer",
    ]
    assert problems_of({"kind": "SlurmCluster"}) == ["spec: field required"]
    assert problems_of([]) == ["<root>: expected an object, got list"]  # type: ignore[arg-type]


def test_validate_spec_on_a_parsed_spec() -> None:
    spec = SlurmClusterSpec.model_validate(
        cluster(partitions=[{"name": "a", "workers": ["nope"], "default": True}])["spec"]
    )
    assert [p.path for p in validate_spec(spec)] == ["spec.partitions[0].workers[0]"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1e9999999999", "'1e9999999999' is above the maximum of 1Ei (1152921504606846976)"),
        ("1e400", "'1e400' is above the maximum of 1Ei (1152921504606846976)"),
        ("-1Gi", "'-1Gi' is negative; a size or count is 0 or more"),
        (-1, "-1 is negative; a size or count is 0 or more"),
        ("2Ei", "'2Ei' is above the maximum of 1Ei (1152921504606846976)"),
        ("lots", "'lots' is not a Kubernetes quantity (e.g. 500m, 64Gi, 4)"),
    ],
)
def test_quantities_out_of_range_name_the_field(value: object, message: str) -> None:
    obj = cluster(workers=[{"name": "cpu", "resources": {"requests": {"memory": value}}}])
    assert problems_of(obj) == [f"spec.workers[0].resources.requests.memory: value error, {message}"]
    # The CRD schema already refuses the strings among them at `kubectl apply`.
    if isinstance(value, str) and value != "2Ei":
        bad = {"jail": {"volume": {"claimName": "j"}, "sharedMemorySize": value}, "workers": [{"name": "cpu"}]}
        assert list(jsonschema.Draft7Validator(spec_schema()).iter_errors(bad))


def test_largest_quantity_is_accepted() -> None:
    assert problems_of(cluster(workers=[{"name": "cpu", "resources": {"limits": {"memory": "1Ei"}}}])) == []


def test_partition_named_default_and_record_keywords_as_options() -> None:
    obj = cluster(
        partitions=[
            {"name": "default", "default": True, "options": {"NodeName": "x", "nodeaddr": "y", "MaxTime": "1:00"}}
        ]
    )
    assert problems_of(obj) == [
        'spec.partitions[0].name: Slurm reserves "default" (PartitionName=DEFAULT sets defaults for every '
        "partition); choose another name",
        "spec.partitions[0].options.NodeName: NodeName is a slurm.conf node or record keyword, not a partition option",
        "spec.partitions[0].options.nodeaddr: nodeaddr is a slurm.conf node or record keyword, not a partition option",
    ]


@pytest.mark.parametrize("value", ["1:00#comment", "a\nNodeName=evil", "a\x00b", "tab\there"])
def test_partition_option_values_cannot_end_or_break_the_line(value: str) -> None:
    obj = cluster(partitions=[{"name": "main", "default": True, "options": {"MaxTime": value}}])
    (problem,) = [p for p in problems_of(obj) if "NUL" not in p]
    assert problem.startswith("spec.partitions[0].options.MaxTime: string should match pattern")


def test_nul_bytes_anywhere_are_named() -> None:
    obj = cluster(
        slurm={"extraConfig": "MaxJobCount=5\x00"},
        login={"service": {"annotations": {"a\x00": "b"}}},
    )
    assert problems_of(obj) == [
        "spec.slurm.extraConfig: contains a NUL byte",
        "spec.login.service.annotations.a\\x00: the key contains a NUL byte",
        "spec.login.service.annotations.a\\x00: 'a\\x00': the name must be at most 63 characters of letters, digits, "
        "'-', '_' or '.', starting and ending with a letter or digit",
    ]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/.", "/. is not a clean absolute path: no '.', '..', '//' or trailing '/'"),
        ("/x/../..", "/x/../.. is not a clean absolute path: no '.', '..', '//' or trailing '/'"),
        ("/../../etc", "/../../etc is not a clean absolute path: no '.', '..', '//' or trailing '/' "
         "(did you mean /etc?)"),
        ("//srv", "//srv is not a clean absolute path: no '.', '..', '//' or trailing '/' (did you mean /srv?)"),
        ("/data/", "/data/ is not a clean absolute path: no '.', '..', '//' or trailing '/' (did you mean /data?)"),
        ("/proc", "/proc would cover or sit inside /proc, which slurmctl mounts into the jail itself"),
        ("/dev/shm", "/dev/shm would cover or sit inside /dev, which slurmctl mounts into the jail itself"),
        ("/sys", "/sys would cover or sit inside /sys, which slurmctl mounts into the jail itself"),
        ("/etc", "/etc would cover or sit inside /etc/slurm, which slurmctl mounts into the jail itself"),
        ("/run", "/run would cover or sit inside /run/munge, which slurmctl mounts into the jail itself"),
        ("/usr/lib/slurmctl", "/usr/lib/slurmctl would cover or sit inside /usr/lib/slurmctl, which slurmctl mounts "
         "into the jail itself"),
        ("/usr", "/usr would cover or sit inside /usr/lib/slurmctl, which slurmctl mounts into the jail itself"),
        ("/usr/local", "/usr/local is a system directory of the jail: root there would run or read what the volume "
         "holds"),
        ("/etc/ssl/private", "/etc/ssl/private is a system directory of the jail: root there would run or read what "
         "the volume holds"),
        ("/var/lib/x", "/var/lib/x is a system directory of the jail: root there would run or read what the volume "
         "holds"),
        ("/tmp/x", "/tmp/x is a system directory of the jail: root there would run or read what the volume holds"),
        ("/bin", "/bin is a system directory of the jail: root there would run or read what the volume holds"),
    ],
)  # fmt: skip
def test_sub_mount_paths_must_be_clean_and_stay_off_what_slurmctl_mounts(path: str, message: str) -> None:
    obj = cluster(
        jail={
            "volume": {"claimName": "j"},
            "subMounts": [{"name": "x", "mountPath": path, "volume": {"claimName": "c"}}],
        }
    )
    assert problems_of(obj) == [f"spec.jail.subMounts[0].mountPath: {message}"]


def test_harmless_sub_mount_paths_are_fine() -> None:
    mounts = [
        {"name": f"m{i}", "mountPath": p, "volume": {"claimName": "c"}}
        for i, p in enumerate(["/home", "/srv/data", "/opt/software", "/scratch/ds", "/usr2", "/etcetera"])
    ]
    assert problems_of(cluster(jail={"volume": {"claimName": "j"}, "subMounts": mounts})) == []


@pytest.mark.parametrize("name", ["Not_A_DNS_Name", "db/secret", "-db", "a" * 254])
def test_the_password_secret_must_be_a_dns_name(name: str) -> None:
    external = {"host": "db", "user": "slurm", "passwordSecretRef": {"name": name}}
    (problem,) = problems_of(cluster(accounting={"enabled": True, "external": external}))
    assert problem.startswith("spec.accounting.external.passwordSecretRef.name: string should")


# --- property-based: generated specs never crash the validator --------------------------------------------------

dns_label = st.from_regex(r"[a-z]([-a-z0-9]{0,18}[a-z0-9])?", fullmatch=True)
quantity = st.one_of(st.integers(0, 2**40), st.from_regex(r"[0-9]{1,4}(Ki|Mi|Gi|m|k|M|G)?", fullmatch=True))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    groups = draw(st.lists(dns_label, min_size=1, max_size=4))
    workers = [
        {
            "name": name,
            **draw(st.fixed_dictionaries({}, optional={"size": st.integers(0, 1000), "gpus": st.integers(0, 16)})),
            **draw(st.fixed_dictionaries({}, optional={"sharedMemorySize": quantity, "features": st.just(["x"])})),
        }
        for name in groups
    ]
    spec: dict[str, Any] = {"jail": {"volume": {"claimName": draw(dns_label)}}, "workers": workers}
    if draw(st.booleans()):
        names = draw(st.lists(dns_label, min_size=1, max_size=3))
        spec["partitions"] = [
            {
                "name": name,
                "workers": draw(st.lists(st.sampled_from([*groups, "unknown"]), max_size=3)),
                "default": draw(st.booleans()),
            }
            for name in names
        ]
    if draw(st.booleans()):
        spec["accounting"] = {"enabled": draw(st.booleans())}
        if draw(st.booleans()):
            spec["accounting"]["mariadb"] = {"enabled": draw(st.booleans()), "storage": {"size": draw(quantity)}}
    if draw(st.booleans()):
        spec["healthChecks"] = {
            "ncclBenchmark": {"enabled": draw(st.booleans()), "minBytes": draw(quantity), "maxBytes": draw(quantity)}
        }
    if draw(st.booleans()):
        spec["login"] = {
            "size": draw(st.integers(0, 16)),
            "service": {"type": draw(st.sampled_from(["ClusterIP", "NodePort", "LoadBalancer"]))},
        }
    return spec


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs())
def test_generated_specs_agree_with_the_schema_and_round_trip(spec: dict[str, Any]) -> None:
    obj = {"apiVersion": "slurm.slurmctl.io/v1", "kind": "SlurmCluster", "metadata": {"name": "c"}, "spec": spec}
    parsed, problems = check_cluster(obj, policy=OPEN_POLICY)
    assert not list(jsonschema.Draft7Validator(spec_schema()).iter_errors(spec))
    assert parsed is not None, problems
    assert all(p.path.startswith("spec.") for p in problems)
    assert SlurmCluster.model_validate(parsed.to_dict()) == parsed
    # The API server's defaults and the models' defaults are the same defaults.
    assert SlurmClusterSpec.model_validate(apply_defaults(spec, spec_schema())) == parsed.spec
    assert apply_defaults(parsed.spec.to_dict(), spec_schema()) == parsed.spec.to_dict()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs(), data=st.data(), garbage=json_values)
def test_mangled_specs_never_crash_the_validator(spec: dict[str, Any], data: st.DataObject, garbage: Any) -> None:
    obj: dict[str, Any] = {"apiVersion": "slurm.slurmctl.io/v1", "kind": "SlurmCluster", "spec": copy.deepcopy(spec)}
    path = data.draw(st.sampled_from(_paths(obj)))
    if path:
        parent = obj
        for step in path[:-1]:
            parent = parent[step]
        parent[path[-1]] = garbage
    else:
        obj = garbage
    parsed, problems = check_cluster(obj, policy=OPEN_POLICY)
    assert parsed is not None or problems
    for problem in problems:
        assert problem.path and problem.message and "\n" not in str(problem)


def test_clusters_in_the_namespaces_kubernetes_keeps_for_itself_are_refused() -> None:
    obj = {
        "apiVersion": "slurm.slurmctl.io/v1",
        "kind": "SlurmCluster",
        "metadata": {"name": "c", "namespace": "kube-system"},
        "spec": {"jail": {"volume": {"claimName": "jail"}}, "workers": [{"name": "cpu", "size": 1}]},
    }
    _, problems = check_cluster(obj, policy=OPEN_POLICY)
    assert [p.path for p in problems] == ["metadata.namespace"]


def test_pyxis_argument_names_cannot_break_the_plugstack_line() -> None:
    obj = cluster(containers={"pyxis": {"enabled": True, "arguments": {"runtime_path": "/run/pyxis", "a b": "1"}}})
    assert problems_of(obj) == [
        "spec.containers.pyxis.arguments.a b: argument names are letters, digits and '_', starting with a letter "
        "(at most 64)"
    ]


EXTERNAL = {"host": "db", "user": "slurm", "passwordSecretRef": {"name": "db", "key": "password"}}


def test_limits_naming_an_unknown_tres_parent_or_qos_name_the_field() -> None:
    obj = cluster(
        accounting={
            "enabled": True,
            "external": EXTERNAL,
            "qos": [{"name": "small", "maxTRESPerJob": {"gres/fpga": 1, "cpu": 2}, "grpTRES": {"gres/gpu": 8}}],
            "accounts": [
                {"name": "physics", "parent": "science", "qos": ["small", "fast"], "users": ["alice"]},
                {"name": "a", "parent": "b"},
                {"name": "b", "parent": "a", "defaultQos": "normal", "qos": ["small"]},
            ],
        },
        workers=[{"name": "cpu", "size": 2}],  # no GPU group: gres/gpu is not tracked
    )
    known = "billing, cpu, energy, fs/disk, mem, node, pages, vmem"
    assert problems_of(obj) == [
        f'spec.accounting.qos[0].maxTRESPerJob.gres/fpga: unknown TRES "gres/fpga": this cluster tracks {known}',
        f'spec.accounting.qos[0].grpTRES.gres/gpu: unknown TRES "gres/gpu": this cluster tracks {known}',
        'spec.accounting.accounts[0].parent: unknown account "science" (root or one declared here)',
        'spec.accounting.accounts[0].qos[1]: unknown QOS "fast" (normal or one declared here)',
        'spec.accounting.accounts[1].parent: account "a" would be its own ancestor',
        'spec.accounting.accounts[2].parent: account "b" would be its own ancestor',
        'spec.accounting.accounts[2].defaultQos: "normal" is not one of the account\'s qos',
    ]


def test_gpu_groups_and_extra_config_add_tracked_tres() -> None:
    limits = {"maxTRESPerJob": {"gres/gpu": 8, "license/matlab": 1}}
    obj = cluster(
        accounting={"enabled": True, "external": EXTERNAL, "qos": [{"name": "gpu", **limits}]},
        slurm={"extraConfig": "AccountingStorageTRES=license/matlab\nLicenses=matlab:4\n"},
    )
    assert problems_of(obj) == []


def test_accounts_without_accounting_and_a_key_that_is_no_tres() -> None:
    assert problems_of(cluster(accounting={"enabled": False, "accounts": [{"name": "physics"}]})) == [
        "spec.accounting: accounts and qos need accounting: set enabled: true"
    ]
    bad_key = cluster(accounting={"enabled": True, "external": EXTERNAL, "qos": [{"name": "q", "grpTRES": {"a b": 1}}]})
    assert problems_of(bad_key) == [
        "spec.accounting.qos[0].grpTRES.a b: not a TRES name (type or type/name, e.g. gres/gpu)"
    ]


def test_declared_limits_make_enforcement_an_operator_owned_key() -> None:
    accounting = {"enabled": True, "external": EXTERNAL, "qos": [{"name": "q", "maxJobsPerUser": 1}]}
    obj = cluster(accounting=accounting, slurm={"extraConfig": "AccountingStorageEnforce=associations\n"})
    assert [p.split(":")[0] for p in problems_of(obj)] == ["spec.slurm.extraConfig"]
    assert "AccountingStorageEnforce" in problems_of(obj)[0]
    del accounting["qos"]
    assert problems_of(cluster(accounting=accounting, slurm={"extraConfig": "AccountingStorageEnforce=qos\n"})) == []


def test_topology_needs_exactly_one_of_tree_and_block() -> None:
    tree = {"levels": ["topology.kubernetes.io/zone", "example.com/switch"]}
    assert problems_of(cluster(topology={"tree": tree})) == []
    assert problems_of(cluster(topology={"block": {"label": "nvidia.com/gpu.clique"}})) == []
    both = cluster(topology={"tree": tree, "block": {"label": "nvidia.com/gpu.clique"}})
    assert problems_of(both) == ["spec.topology: set exactly one of tree and block (got tree, block)"]
    assert problems_of(cluster(topology={})) == ["spec.topology: set exactly one of tree and block (got neither)"]
    # The API server refuses both at `kubectl apply` already (minProperties/maxProperties 1).
    schema = spec_schema()["properties"]["topology"]
    assert (schema["minProperties"], schema["maxProperties"]) == (1, 1)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(both["spec"]["topology"], schema)


def test_topology_levels_are_label_keys_named_once() -> None:
    obj = cluster(topology={"tree": {"levels": ["example.com/switch", "rack", "example.com/switch"]}})
    assert problems_of(obj) == ['spec.topology.tree.levels[2]: label "example.com/switch" is also level 0']
    bad = problems_of(cluster(topology={"tree": {"levels": ["not a label/"]}}))
    assert len(bad) == 1 and bad[0].startswith("spec.topology.tree.levels[0]: string should match pattern")
    assert problems_of(cluster(topology={"tree": {"levels": []}}))[0].startswith("spec.topology.tree.levels:")
    bad_block = problems_of(cluster(topology={"block": {"label": "-x"}}))
    assert bad_block[0].startswith("spec.topology.block.label: string should match pattern")


def test_topology_owns_the_topology_plugin() -> None:
    obj = cluster(topology={"tree": {"levels": ["rack"]}}, slurm={"extraConfig": "TopologyPlugin=topology/block\n"})
    (problem,) = problems_of(obj)
    assert problem.startswith("spec.slurm.extraConfig: line 1: TopologyPlugin is owned by slurmctl")
    assert problems_of(cluster(slurm={"extraConfig": "TopologyPlugin=topology/tree\n"})) == []


def test_elastic_groups_that_cannot_work_name_the_field() -> None:
    elastic = {"name": "cpu", "autoscale": {"min": 4, "max": 3, "idleTime": "10s", "resumeTimeout": "5s"}}
    assert problems_of(cluster(workers=[elastic])) == [
        "spec.workers[0].autoscale.min: min 4 is more than max 3",
        "spec.workers[0].autoscale.idleTime: at least 20s",
        "spec.workers[0].autoscale.resumeTimeout: at least 20s",
    ]
    ok = {"name": "cpu", "autoscale": {"max": 3}}
    assert problems_of(cluster(workers=[ok])) == []
    assert problems_of(cluster(workers=[ok], rest={"enabled": False})) == [
        "spec.workers[0].autoscale: an elastic group needs slurmrestd (spec.rest.enabled): it follows Slurm's power "
        "states"
    ]
    topology = problems_of(cluster(workers=[ok], topology={"tree": {"levels": ["example.com/switch"]}}))
    assert topology == [
        "spec.workers[0].autoscale: an elastic group cannot be combined with spec.topology yet (its powered-down "
        "nodes have no place in topology.conf)"
    ]


def test_an_elastic_groups_maximum_counts_toward_the_cluster_total() -> None:
    groups = [{"name": f"g{i}", "autoscale": {"max": 1000}} for i in range(17)]
    assert problems_of(cluster(workers=groups)) == [
        "spec.workers: 17000 worker nodes in total exceed the maximum of 16384"
    ]


def test_power_saving_keys_are_the_operators_while_a_group_is_elastic() -> None:
    extra = "SuspendTime=60\n"
    assert problems_of(cluster(slurm={"extraConfig": extra})) == []
    problems = problems_of(cluster(workers=[{"name": "cpu", "autoscale": {"max": 3}}], slurm={"extraConfig": extra}))
    assert len(problems) == 1 and "SuspendTime" in problems[0], problems


def test_the_operators_image_policy_names_each_image_it_refuses() -> None:
    policy = Policy(allowed_images=("registry.example.com/slurm/",))
    _, problems = check_cluster(cluster(), policy=policy)
    assert problems and all("is not allowed by the operator" in str(p) for p in problems)
    assert any(str(p).startswith("spec.slurm.imageRegistry: ") for p in problems), "defaults come from the registry"
    allowed = cluster(slurm={"imageRegistry": "registry.example.com/slurm"})
    assert [str(p) for p in check_cluster(allowed, policy=policy)[1]] == []
    own = cluster(slurm={"imageRegistry": "registry.example.com/slurm"})
    own["spec"]["workers"][0]["image"] = "evil.example.org/worker:1"
    assert [str(p) for p in check_cluster(own, policy=policy)[1]] == [
        'spec.workers[0].image: image "evil.example.org/worker:1" is not allowed by the operator (allowed: '
        "registry.example.com/slurm/)"
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "value error, 0 is less than 1 (a roll takes out at least one node at a time)"),
        ("0%", "value error, '0%' is neither a count nor a percentage from 1% to 100%"),
        ("5", "value error, '5' is neither a count nor a percentage from 1% to 100%"),
    ],
)
def test_max_unavailable_out_of_range_names_the_field(value: object, message: str) -> None:
    """A count below 1 passes the schema (the node is untyped, as quantities are): the operator names it."""
    assert problems_of(cluster(maintenance={"maxUnavailable": value})) == [
        f"spec.maintenance.maxUnavailable: {message}"
    ]


def test_max_unavailable_as_nodes_of_the_fixed_workers() -> None:
    """A percentage of the fixed groups' sizes, rounded down, at least one node; elastic groups do not count."""
    workers = [{"name": "cpu", "size": 30}, {"name": "gpu", "size": 10}, {"name": "e", "autoscale": {"max": 500}}]

    def limit(value: object) -> int:
        return SlurmClusterSpec.model_validate(
            cluster(workers=workers, maintenance={"maxUnavailable": value})["spec"]
        ).roll_limit()

    assert [limit(v) for v in (1, 7, "10%", "1%", "100%")] == [1, 7, 4, 1, 40]
    assert SlurmClusterSpec.model_validate(cluster()["spec"]).roll_limit() == 1
