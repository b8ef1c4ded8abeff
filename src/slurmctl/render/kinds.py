"""The one table of the API kinds slurmctl reads and writes, as (apiVersion, kind) pairs.

Renderers put these in the objects they build, reconcilers watch and read them, registration resolves the ones whose
served version depends on the cluster (`FALLBACKS`, by discovery). A kind is spelled here and nowhere else.
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
# Kubernetes before 1.21 serves CronJobs only as batch/v1beta1; from 1.25 only batch/v1 is served.
CRONJOB_V1BETA1: Final = Kind("batch/v1beta1", "CronJob")
PDB: Final = Kind("policy/v1", "PodDisruptionBudget")
# Kubernetes before 1.21 serves PodDisruptionBudgets only as policy/v1beta1; from 1.25 only policy/v1 is served.
PDB_V1BETA1: Final = Kind("policy/v1beta1", "PodDisruptionBudget")
# mariadb-operator's database; its CRD may be installed after the operator starts, so it is never watched.
MARIADB: Final = Kind("k8s.mariadb.com/v1alpha1", "MariaDB")

# The current version of a kind -> older versions to use, in order, where discovery shows it is not served.
FALLBACKS: Final[dict[Kind, tuple[Kind, ...]]] = {CRONJOB: (CRONJOB_V1BETA1,), PDB: (PDB_V1BETA1,)}
