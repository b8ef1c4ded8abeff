"""The one table of the API kinds slurmctl reads and writes, as (apiVersion, kind) pairs.

Renderers put these in the objects they build, reconcilers watch and read them. Each kind has one version, with no
fallback to an older one: every Kubernetes release slurmctl supports (1.32 and later, checked at start) serves the
built-in kinds at these versions. A kind is spelled here and nowhere else.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from slurmctl.api.v1 import API_VERSION, KIND


class Kind(NamedTuple):
    api_version: str
    kind: str


SLURM_CLUSTER: Final = Kind(API_VERSION, KIND)
CONFIGMAP: Final = Kind("v1", "ConfigMap")
SECRET: Final = Kind("v1", "Secret")
POD: Final = Kind("v1", "Pod")
NODE: Final = Kind("v1", "Node")
SERVICE: Final = Kind("v1", "Service")
STATEFULSET: Final = Kind("apps/v1", "StatefulSet")
DEPLOYMENT: Final = Kind("apps/v1", "Deployment")
JOB: Final = Kind("batch/v1", "Job")
CRONJOB: Final = Kind("batch/v1", "CronJob")
PDB: Final = Kind("policy/v1", "PodDisruptionBudget")
NETWORK_POLICY: Final = Kind("networking.k8s.io/v1", "NetworkPolicy")
# The resume signal's identity (render/power.py): written, never watched.
SERVICE_ACCOUNT: Final = Kind("v1", "ServiceAccount")
ROLE: Final = Kind("rbac.authorization.k8s.io/v1", "Role")
ROLE_BINDING: Final = Kind("rbac.authorization.k8s.io/v1", "RoleBinding")
# mariadb-operator's database; its CRD may be installed after the operator starts, so it is never watched.
MARIADB: Final = Kind("k8s.mariadb.com/v1alpha1", "MariaDB")
