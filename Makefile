# The verbs. `make test` and `make run` set up everything they need themselves (apt packages, .venv, control plane).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: setup run test test-other-line lint unit e2e manifests plugin plugin-lint images images-lint bench \
        cluster-build cluster-up cluster-down cluster-status clean

$(STAMP): pyproject.toml hack/setup.sh
	hack/setup.sh "$(VENV)"

setup: $(STAMP)

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

# Everything CI checks, then every test in one pytest run so the output ends with pytest's summary line. The
# real-pods tests run the images `make images` built (cached: seconds when nothing changed). The other Slurm line is
# proven at host level first (test-other-line), so the output still ends with the main run's summary line.
test: setup cluster-build lint images test-other-line
	$(BIN)/pytest test $(PYTEST_ARGS)

# The host-level Slurm tests (hack/local-slurm.sh, the C plugins built against the line's headers, the REST client
# against its slurmrestd) on the Slurm line that is not the default: 26.05, Debian testing's (docs/slurm-26.05.md).
OTHER_SLURM_LINE ?= 26.05
test-other-line: setup
	SLURM_LINE=$(OTHER_SLURM_LINE) $(BIN)/pytest test/e2e/slurm -q -p no:cacheprovider

unit: setup
	$(BIN)/pytest test/unit $(PYTEST_ARGS)

e2e: setup cluster-build images
	$(BIN)/pytest test/e2e $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy src
	$(BIN)/lint-imports
	@if [ -x hack/plugin-lint.sh ]; then hack/plugin-lint.sh; fi
	@if [ -x hack/images-lint.sh ]; then PATH="$(CURDIR)/$(BIN):$$PATH" hack/images-lint.sh; fi

# Build every image under images/ with buildah (cached by context hash) and import it into the node's containerd.
# IMAGES="controller worker" builds a subset.
IMAGES ?=
images: setup
	PYTHON="$(CURDIR)/$(BIN)/python" hack/images.sh build $(IMAGES)

images-lint: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" hack/images-lint.sh

plugin-lint:
	hack/plugin-lint.sh

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
