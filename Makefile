# The verbs. `make test` and `make run` set up everything they need themselves (apt packages, .venv, control plane).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# pytest-xdist workers of `make test` and `make e2e`: modules run side by side, each module's tests together on one
# worker (docs/testing.md). Three keep two cores busy while the real-pods modules mostly wait; 0 runs in one process.
TEST_WORKERS ?= 3
XDIST := -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

.PHONY: setup lock run test test-other-line test-oldest-kube oldest-kube-build lint unit e2e manifests plugin plugin-lint images images-both-lines images-lint bench \
        cluster-build cluster-up cluster-down cluster-status clean

$(STAMP): pyproject.toml requirements/dev.lock hack/setup.sh hack/helm.sh hack/deps/helm
	hack/setup.sh "$(VENV)"

setup: $(STAMP)

# The Python packages come from requirements/*.lock (pinned, with hashes), made from pyproject.toml's ranges by uv:
# run after changing pyproject.toml's requirements. LOCK_ARGS="--upgrade-package NAME" (or --upgrade) moves pins
# that pyproject.toml's change does not force (docs/testing.md).
LOCK_ARGS ?=
lock: setup
	$(BIN)/python hack/lock.py update $(LOCK_ARGS)

# The embedded cluster: control plane (hack/control-plane.sh) + real nodes (hack/node.sh) in .cluster/; NODES=3 runs
# three kubelets (each with its own containerd) on this machine.
NODES ?= 1
cluster-build:
	hack/control-plane.sh build
	hack/node.sh build

cluster-up: setup cluster-build
	hack/control-plane.sh up
	NODES=$(NODES) hack/node.sh up

cluster-down:
	hack/node.sh down
	hack/control-plane.sh down

cluster-status:
	hack/control-plane.sh status
	hack/node.sh status

# The oldest Kubernetes minor slurmctl supports (docs/kubernetes.md). `make test` runs the control-plane suite (API
# server + controller manager, no kubelet: test/e2e/test_*.py) on it as well as on the default minor, each test once
# per minor (test/e2e/conftest.py); everything else runs on the default. OLDEST_KUBE_VERSION= (empty) leaves it out.
OLDEST_KUBE_VERSION ?= 1.32
oldest-kube-build:
	$(if $(OLDEST_KUBE_VERSION),KUBE_VERSION=$(OLDEST_KUBE_VERSION) KUBE_BUILD=control-plane hack/control-plane.sh build)

# Everything CI checks, then every test in one pytest run so the output ends with pytest's summary line. The
# real-pods tests run the images `make images` built (cached: seconds when nothing changed). The Kubernetes builds,
# the image builds, lint and the host-level run of the other Slurm line (test-other-line) do not depend on each other
# and run side by side (each one's output printed whole when it ends; apt runs one at a time), so the output still
# ends with the main run's summary line. The Kubernetes builds need no virtualenv: they start at once, beside setup.
test:
	$(MAKE) --no-print-directory --output-sync=target -j5 setup cluster-build oldest-kube-build images-both-lines \
	    lint test-other-line
	OLDEST_KUBE_VERSION=$(OLDEST_KUBE_VERSION) $(BIN)/pytest test $(XDIST) $(PYTEST_ARGS)

# The host-level Slurm tests (hack/local-slurm.sh, the C plugins built against the line's headers, the REST client
# against its slurmrestd) on the Slurm line that is not the default: 26.05, Debian testing's (docs/slurm-26.05.md).
OTHER_SLURM_LINE ?= 26.05
test-other-line: setup
	SLURM_LINE=$(OTHER_SLURM_LINE) $(BIN)/pytest test/e2e/slurm -q -p no:cacheprovider

# The control-plane suite on the oldest minor alone (what `make test` runs beside the default's).
test-oldest-kube: setup oldest-kube-build
	KUBE_VERSION=$(OLDEST_KUBE_VERSION) $(BIN)/pytest $(wildcard test/e2e/test_*.py) $(XDIST) -p no:cacheprovider

unit: setup
	$(BIN)/pytest test/unit $(PYTEST_ARGS)

e2e: setup cluster-build oldest-kube-build images-both-lines
	OLDEST_KUBE_VERSION=$(OLDEST_KUBE_VERSION) $(BIN)/pytest test/e2e $(XDIST) $(PYTEST_ARGS)

lint: setup
	$(BIN)/python hack/lock.py check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy src hack/lock.py
	$(BIN)/lint-imports
	hack/helm.sh run lint --strict charts/slurmctl
	hack/helm.sh run lint --strict charts/slurmctl --set 'watchNamespaces={team-a,team-b}' --set rbac.nodeCordon=true
	hack/helm.sh run lint --strict charts/slurmctl --set rbac.namespaced=false --set-json 'watchNamespaces=[]'
	@if [ -x hack/plugin-lint.sh ]; then hack/plugin-lint.sh; fi
	@if [ -x hack/images-lint.sh ]; then PATH="$(CURDIR)/$(BIN):$$PATH" hack/images-lint.sh; fi

# Build every image under images/ with buildah (cached by context hash) and import it into the node's containerd.
# IMAGES="controller worker" builds a subset.
IMAGES ?=
images: setup
	PYTHON="$(CURDIR)/$(BIN)/python" hack/images.sh build $(IMAGES)

# The other line's Slurm images too (tags <tag>-slurm26.05): the upgrade test (test/e2e/pods/test_upgrade.py) moves a
# cluster from the default line's images to them. One after the other: the two builds share buildah's storage and apt.
images-both-lines: setup
	PYTHON="$(CURDIR)/$(BIN)/python" hack/images.sh build $(IMAGES)
	SLURM_LINE=$(OTHER_SLURM_LINE) PYTHON="$(CURDIR)/$(BIN)/python" hack/images.sh build $(IMAGES)

images-lint: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" hack/images-lint.sh

plugin-lint:
	hack/plugin-lint.sh

# The CRD and the operator's ClusterRole under config/, and the chart's copies of them (charts/slurmctl/templates).
manifests: setup
	$(BIN)/python hack/gen_crd.py

# Compiled inside the cached Debian root filesystem of hack/local-slurm.sh, against its Slurm's headers (24.11; SLURM_LINE=26.05).
plugin:
	hack/local-slurm.sh plugin

bench: setup cluster-build
	$(BIN)/python -m bench

run: setup
	hack/run.sh "$(VENV)"

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
