# areal-workers developer entry points. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST := $(VENV)/bin/pytest
PYTEST_ARGS ?=
# The server worker pods run on the local cluster: auto (AReaL's rpc_server once `make areal-worker` ran, else the
# reference guard), areal or reference. Empty: $AREAL_WORKERS_WORKER, else auto; a running podrunner is kept.
WORKERS ?=
# The local cluster's admin kubeconfig (.tools/kubeconfig, or that of the cluster AREAL_WORKERS_CLUSTER_DIR names), as
# a command substitution the shell runs when the recipe line runs: a `$(shell ...)` would run when make expands the
# whole recipe, before its first lines have made the virtualenv and the cluster.
CLUSTER_KUBECONFIG = "$$($(PY) tools/localcluster.py kubeconfig)"
KUBECTL_LOCAL = kubectl --kubeconfig $(CLUSTER_KUBECONFIG)
export PATH := $(CURDIR)/.tools/bin:$(CURDIR)/$(VENV)/bin:$(PATH)
# AReaL's environment (`make areal-worker`) with this checkout's package and tools/ (the local cluster's packages)
# on its path: what runs AReaL's own controllers, i.e. the demo's trainer.
AREAL_PY = PYTHONPATH=$(CURDIR)/adapter:$(CURDIR)/tools .tools/areal-worker/bin/python

.PHONY: help tools areal-worker venv cluster-up cluster-down cluster-status demo quickstart release lint typecheck shellcheck check test test-helm4 test-areal test-unit test-chart test-integration docs clean bench bench-full

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# The package's extras the virtualenv has: all of them for the tests, the static checks, the release and the
# benchmarks; `make demo` asks only for the demo's and the local cluster's (VENV_EXTRAS=demo,localcluster), so a
# newcomer's first command installs no test runner, linter or plotting library. A stamp per extra: a later target
# installs the extras it lacks into the same virtualenv.
# Every version pinned by tools/install/dev-constraints.txt (a fresh clone tests with what CI tested).
VENV_EXTRAS ?= dev,demo,bench,localcluster
comma := ,
VENV_STAMPS := $(foreach extra,$(subst $(comma), ,$(VENV_EXTRAS)),$(VENV)/.installed-$(extra))
$(VENV_STAMPS) &: pyproject.toml tools/install/dev-constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -c tools/install/dev-constraints.txt --upgrade pip setuptools wheel
	$(VENV)/bin/pip install --quiet -c tools/install/dev-constraints.txt -e '.[$(VENV_EXTRAS)]'
	touch $(VENV_STAMPS)

# tools/ and tests/support on the virtualenv's path (a .pth file), as pytest has them (pyproject.toml): the
# benchmarks, the doc generators and `python -m podrunner` import the local cluster's packages (the stand-in worker
# server of tools/localworker among them) and the tests' wire types like installed modules.
$(VENV)/.dev-paths: $(VENV_STAMPS)
	printf '%s\n' $(CURDIR)/tools $(CURDIR)/tests/support \
	  >"$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/areal-workers-dev.pth"
	touch $@

venv: $(VENV_STAMPS) $(VENV)/.dev-paths ## Python virtualenv with the package and its extras (VENV_EXTRAS: all of them by default)

# TOOLS: the tools of tools/install/tools.sh to install (empty: all of them). `make demo` asks only for what its local
# cluster runs (the control plane, KWOK, the real node, the registry), so a newcomer's first demo does not wait for the
# tools only the tests use (helm 4, ct, kubeconform, helm-unittest, Kueue, crane, Argo CD: about 14 minutes cold).
TOOLS ?=
DEMO_TOOLS := system_packages node_images helm3_kubectl etcd kwok kubernetes kubelet coredns network_policies registry
# helm and kubectl also beside the virtualenv's python, where .venv/bin/areal-workers finds helm off PATH.
tools: venv ## build/download the pinned tools into the cache and link them into .tools/bin (helm, kubectl: .venv/bin too; TOOLS=names: only those)
	tools/install/tools.sh $(TOOLS)
	# Relative links: a docs test runs make in a sandbox of links to the checkout, whose .venv is this one.
	ln -sf ../../.tools/bin/helm ../../.tools/bin/kubectl $(VENV)/bin/

areal-worker: ## AReaL's real worker server (pinned, CPU torch, ~7 GB) in the cache, linked as .tools/areal-worker
	PYTHON=$(PYTHON) tools/install/areal-worker.sh

# NODE=real: also the real node (kubelet + containerd running real containers; root; docs/en/real-node.md); auto: when
# this machine can run it. KUEUE=1: also Kueue (its webhooks act only in namespaces labelled areal-workers.local/kueue=true).
# ARGOCD=1: also Argo CD (redis, repo-server, application controller).
NODE ?=
KUEUE ?=
ARGOCD ?=
# Cold, the tools' Go builds (CPU-bound) and AReaL's worker environment (a 7 GB download and unpack) run side by side;
# warm, both are skipped in seconds.
TOOLS_AND_WORKER = $(MAKE) --no-print-directory -j2 --output-sync=target tools areal-worker

cluster-up: ## start the local control plane, KWOK nodes and podrunner (no-op when running; WORKERS=areal|reference, NODE=real, KUEUE=1, ARGOCD=1)
	$(TOOLS_AND_WORKER)
	$(PY) tools/localcluster.py up $(if $(WORKERS),--workers $(WORKERS)) $(if $(NODE),--real-node $(NODE)) $(if $(filter 1,$(KUEUE)),--kueue) $(if $(ARGOCD),--argocd)

cluster-down: ## stop the local cluster, every worker process and Argo CD; leaves no process or port behind
	$(PY) tools/localcluster.py down

cluster-status: ## exit 0 when the local control plane and podrunner answer (shows the worker server)
	$(PY) tools/localcluster.py status

DEMO_ARGS ?=
# The demo's workers run AReaL's server: `up --workers areal` is cluster-up, with a podrunner that serves it.
# IN_CLUSTER=1: the demo's trainer runs as a pod (areal-workers submit: a Job as the rbac/ ServiceAccount, in
# namespace bandit-demo), reaching its workers at their pod IPs; its log and exit code come back here.
IN_CLUSTER ?=
DEMO_NAMESPACE := bandit-demo
demo: ## the first command: the local cluster, then examples/bandit_demo/demo.py (KubernetesScheduler runs a small RL loop; IN_CLUSTER=1: as a trainer pod)
	$(TOOLS_AND_WORKER) TOOLS="$(DEMO_TOOLS)" VENV_EXTRAS=demo,localcluster
	$(PY) tools/localcluster.py up --workers areal --real-node $(or $(NODE),auto) --registry
ifeq ($(IN_CLUSTER),1)
	$(KUBECTL_LOCAL) create namespace $(DEMO_NAMESPACE) --dry-run=client -o yaml | $(KUBECTL_LOCAL) apply -f - >/dev/null
	$(PY) tools/localcluster.py rbac $(DEMO_NAMESPACE) >/dev/null
	$(KUBECTL_LOCAL) -n $(DEMO_NAMESPACE) delete job bandit-demo-trainer --ignore-not-found >/dev/null
	$(VENV)/bin/areal-workers --kubeconfig $(CLUSTER_KUBECONFIG) -n $(DEMO_NAMESPACE) submit \
	  --image local/areal-trainer:dev --name bandit-demo-trainer -- \
	  python $(CURDIR)/examples/bandit_demo/demo.py --namespace $(DEMO_NAMESPACE) --local-cluster-pod $(DEMO_ARGS)
else
	$(AREAL_PY) examples/bandit_demo/demo.py --kubeconfig $(CLUSTER_KUBECONFIG) $(DEMO_ARGS)
endif

quickstart: cluster-up ## the chart alone: local cluster, the chart installed with the example topology, helm test
	helm upgrade --install demo charts/areal-workers --kubeconfig $(CLUSTER_KUBECONFIG) \
	  --namespace areal-demo --create-namespace -f examples/values-example.yaml --wait --timeout 5m
	helm test demo --kubeconfig $(CLUSTER_KUBECONFIG) --namespace areal-demo --timeout 3m
	$(KUBECTL_LOCAL) -n areal-demo get statefulsets,services,pods -o wide

# The release of this checkout's version (adapter/areal_workers/_version.py): the wheel, the sdist, the packaged
# chart and the reaper image (a docker-archive tar) in dist/, each checked (tools/distkit/). REGISTRY=host:port[/path]
# also pushes the chart to oci://$(REGISTRY)/charts and the image to $(REGISTRY)/areal-workers/reaper; REGISTRY_USER logs in first with the password in REGISTRY_PASSWORD_FILE; REGISTRY_CA is the
# CA of a registry a private CA signed (the local cluster's: `localcluster.py registry` prints all of them).
REGISTRY ?=
REGISTRY_USER ?=
REGISTRY_PASSWORD_FILE ?= /dev/null
REGISTRY_CA ?=
release: tools ## build and check the wheel, sdist, packaged chart and reaper image in dist/; REGISTRY=host:port also pushes chart and image
	$(PY) -m distkit build
ifneq ($(REGISTRY),)
	$(PY) -m distkit push --registry $(REGISTRY) $(if $(REGISTRY_USER),--username $(REGISTRY_USER)) \
	  $(if $(REGISTRY_CA),--ca-file $(REGISTRY_CA)) <$(REGISTRY_PASSWORD_FILE)
endif

# Benchmarks on a cluster of their own (ports 20440+, .tools/bench-cluster), stopped afterwards: results in
# bench/results/, rendered into bench/RESULTS.md. Extra arguments: BENCH_ARGS='--only startup'.
BENCH_ARGS ?=
bench: tools areal-worker ## the quick benchmark profile on a cluster of its own, rendered into bench/RESULTS.md
	$(PY) bench/run.py --profile quick $(BENCH_ARGS)

bench-full: tools areal-worker ## the full benchmark profile (up to 1024 workers; long)
	$(PY) bench/run.py --profile full $(BENCH_ARGS)

# Static checks, one tool a line; seconds. Ruff's fixes: `.venv/bin/ruff format` and `.venv/bin/ruff check --fix`
# over the same directories.
LINTED := adapter tools bench examples tests
lint: venv ## static checks: ruff (lint and format, [tool.ruff]) and the adapter's import layers (lint-imports, [tool.importlinter])
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/lint-imports

typecheck: venv ## mypy over the adapter ([tool.mypy]: strict, the kubernetes client read as untyped)
	$(VENV)/bin/mypy

# -x -P SCRIPTDIR: the scripts' `source` of versions.env beside them is checked too.
shellcheck: venv ## ShellCheck over tools/**/*.sh
	$(VENV)/bin/shellcheck -x -P SCRIPTDIR $$(find tools -name '*.sh' | sort)

# The no-cluster tier, also offered as pre-commit hooks (.pre-commit-config.yaml). It stops at the first failure.
check: lint typecheck shellcheck test-unit test-chart ## the no-cluster tier, `make test`'s first step: lint, typecheck, shellcheck, unit and chart tests

# The lanes (main, AReaL's worker server, helm 4, then the tests that change what every test shares) and which of
# them run side by side: tools/test_lanes.py. PYTEST_ARGS go to every lane, not to `make check`, which runs first:
# a selection such as `-k smoke` would leave it no tests to run.
test: venv ## everything: the no-cluster tier (make check) first, then unit, chart, integration, the helm 4 and AReaL-worker lanes, on a local cluster torn down after
	$(MAKE) --no-print-directory check PYTEST_ARGS=
	$(TOOLS_AND_WORKER)
	$(PY) tools/localcluster.py up --real-node $(or $(NODE),real) --kueue --argocd --registry; rc=$$?; \
	if [ $$rc -eq 0 ]; then $(PY) tools/test_lanes.py $(PYTEST_ARGS); rc=$$?; fi; \
	$(PY) tools/localcluster.py down || rc=1; exit $$rc

test-helm4: tools ## the second lane: the release-driving integration tests with helm 4 instead of helm 3
	$(PY) tools/test_lanes.py --lane helm4 $(PYTEST_ARGS)

test-areal: tools areal-worker ## the conformance lane: scheduler tests on AReaL's real worker server
	$(PY) tools/test_lanes.py --lane areal,areal-late $(PYTEST_ARGS)

test-unit: venv ## unit tests only (no tools, no cluster; the ones that need AReaL's environment or helm run in `make test`)
	$(PY) tools/test_lanes.py --lane unit $(PYTEST_ARGS)

# Only the tools the chart tests run, so `make check` on a fresh clone builds none of the cluster's.
CHART_TOOLS := helm3_kubectl helm4 ct kubeconform helm_unittest
test-chart: venv ## chart tests only (helm, helm 4, ct, kubeconform, helm-unittest; no cluster)
	$(MAKE) --no-print-directory tools TOOLS="$(CHART_TOOLS)"
	$(PY) tools/test_lanes.py --lane chart $(PYTEST_ARGS)

test-integration: tools ## integration tests (starts or reuses the local cluster; leaves it running)
	$(PYTEST) -m integration $(PYTEST_ARGS)

docs: venv ## regenerate the generated files: the chart README's values table, docs/*/configuration.md, docs/*/cli.md, the Roles of rbac/
	$(PY) -m docgen.chart
	$(PY) -m docgen.config
	$(PY) -m docgen.cli
	$(PY) -m docgen.rbac

clean: cluster-down ## stop the cluster and remove .tools and the virtualenv (the tool cache stays)
	rm -rf .tools $(VENV)
