# The two commands of the README's quickstart, and the pieces they are made of.
# Everything is installed into the project folder: .tools holds the pinned uv,
# .venv the locked environment (uv.lock). Nothing is downloaded but packages.

PYTHON ?= python3
UV_VERSION := 0.13.9
UV := .tools/bin/uv
export UV_PYTHON_DOWNLOADS := never
export UV_PYTHON := $(shell $(PYTHON) -c 'import sys; print(sys.executable)')
RUN := $(UV) run --locked --no-sync

.PHONY: demo test env lint typecheck contracts unit integration chaos soak control-plane kwok prometheus bench trials image image-test karpenter-e2e karpenter-kwok side-by-side clean

demo: .venv/.synced
	$(RUN) karpy simulate

# Everything: the checks, then the tests without the control plane, then those with it.
test: .venv/.synced lint typecheck contracts control-plane unit integration

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

.venv/.synced: $(UV) pyproject.toml uv.lock
	$(UV) sync --locked --all-extras --quiet
	touch $@

env: .venv/.synced

lint: .venv/.synced
	$(RUN) ruff check src tests scripts benchmarks
	$(RUN) ruff format --check src tests scripts benchmarks

typecheck: .venv/.synced
	$(RUN) mypy

contracts: .venv/.synced
	$(RUN) lint-imports

# The binaries of the integration tests' control plane (cached; the first build takes minutes).
control-plane: .venv/.synced
	scripts/control-plane build

# The real kwok controller (cached), which tests/integration/test_run_real_kwok.py runs the nodes with.
kwok:
	scripts/kwok build

# Prometheus (cached), which tests/integration/test_prometheus_dashboards.py scrapes karpy with, and
# the Grafana dashboard schema checker of tests/test_chart_dashboards.py.
prometheus:
	scripts/prometheus build
	scripts/grafana-dashboard-check build

# Both suites run on two pytest-xdist workers, the machine's two cores.
WORKERS ?= 2

# The tests that need no control plane (about two and a half minutes on 2 cores): the quick check.
unit: .venv/.synced
	$(RUN) pytest -q -m "not integration" -n $(WORKERS)

# The tests against a real control plane (tests/integration), built first if not cached. Each
# worker starts a control plane of its own and takes whole files (their module fixtures share a
# karpy run or a NodePool); the tests mostly wait in real time, so two halve the wall time.
integration: .venv/.synced control-plane kwok prometheus
	$(RUN) pytest -q -m integration -n $(WORKERS) --dist loadfile --durations=12

# The whole chaos matrix (tests/chaos; make test runs a three-round subset): about 45 minutes.
chaos: .venv/.synced control-plane
	KARPY_CHAOS=full $(RUN) pytest -q -s -m chaos

# Twenty minutes of random changes and faults, following the leader's memory and reconcile
# latency (tests/chaos/soak.py; SOAK_MINUTES=N for another length).
soak: .venv/.synced control-plane
	$(RUN) python -m tests.chaos.soak --minutes $${SOAK_MINUTES:-20}

# Karpenter's own e2e suites against karpy run on a control plane of their own (scripts/karpenter-e2e,
# benchmarks/karpenter-e2e/README.md): hours while specs fail (a failure waits out a 10-minute
# Eventually), so not part of test; tests/integration/test_karpenter_e2e_subset.py is its CI subset.
karpenter-e2e: .venv/.synced control-plane kwok
	scripts/karpenter-e2e all $(KARPENTER_E2E_SUITES)

# Karpenter's own controller with its kwok provider, built from sigs.k8s.io/karpenter (cached).
karpenter-kwok:
	scripts/karpenter-kwok build

# The real Karpenter and karpy run on the same workloads, each on a fresh control plane with real
# kwok (benchmarks/README.md, "Karpenter beside karpy"): tens of minutes, so not part of test.
# SIDE_BY_SIDE_ARGS="--shapes seed,basic --scale 0.2" for a shorter run.
side-by-side: .venv/.synced control-plane kwok karpenter-kwok
	$(RUN) python -m benchmarks.side_by_side $(SIDE_BY_SIDE_ARGS)

# The scheduling benchmarks (benchmarks/README.md); a minute or more, so not part of test.
bench: .venv/.synced
	$(RUN) python -m benchmarks.scheduling

# A few hundred bad and odd inputs (binary, special files, absurd sizes, invalid objects) through
# validate, simulate and convert under a memory cap, counted by category (benchmarks/trial_inputs.py);
# about half an hour on two busy cores, so not part of test.
trials: .venv/.synced
	$(RUN) python -m benchmarks.trial_inputs

# The container image (docs/image.md), with buildah on a locally built Debian base: no Docker
# engine and no registry needed (`docker build -t karpy .` does the same where there is one).
image:
	scripts/image build

# The image, then its checks: karpy --version, validate and simulate inside it, as its
# non-root user on a read-only root filesystem; then its `karpy run` against the control plane.
image-test: image .venv/.synced control-plane
	scripts/image test
	KARPY_IMAGE=$$(scripts/image ref) $(RUN) pytest -q -m integration tests/integration/test_image.py

clean:
	rm -rf .venv .tools .mypy_cache .pytest_cache .ruff_cache
