# The two commands of the README: `make run` and `make test`. Both set up everything they need
# on a fresh machine: the venv (.venv) and the real components (.local/bin): `make run` only what
# it runs (kube-apiserver, etcd, kube-scheduler, kube-controller-manager, kubemark, kwok),
# `make test` those and what only the tests use (client-go programs, toxiproxy, helm).
# `make conformance` (not part of `make test`) runs the Kubernetes e2e suite through the proxy and
# against a peer cluster; it builds what `make run` needs and e2e.test.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
export PYTHONPATH := $(CURDIR)

.PHONY: run test unit venv components components-run lint clean bench loadtest soak conformance

$(STAMP): pyproject.toml
	rm -f $(VENV)/.installed-*
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[test]'
	touch $@

venv: $(STAMP)

components:
	bash hack/build-components.sh test

components-run:
	bash hack/build-components.sh run

run: venv components-run
	$(VENV)/bin/python -m hack.run

lint: venv
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# Unit tests only (the pure core, the pipeline steps, the client layer against local peers; no partitions): seconds.
unit: venv
	$(VENV)/bin/pytest tests/routing tests/config tests/proxy -q

test: venv components lint
	$(VENV)/bin/pytest -q -rfE

clean:
	rm -rf $(VENV) .local

# Benchmarks against a peer kube-apiserver in the same run (bench/README.md): minutes each,
# the whole machine; results in .local/bench/*.json, tables from bench.report.
bench: venv components
	$(VENV)/bin/python -m bench.list_nodes
	$(VENV)/bin/python -m bench.watch_fanout
	$(VENV)/bin/python -m bench.cache_memory
	$(VENV)/bin/python -m bench.union_watch
	$(VENV)/bin/python -m bench.report

# The density test (bench/density.py, clusterloader2 style): 1,000 kwok nodes, 2,000 pods at
# 20 pods/s through the proxy, then the same straight at a partition (the peer), same run;
# about 7 minutes on 2 cores. ARGS passes flags, e.g. make loadtest ARGS="--steps 1000,5000,10000".
loadtest: venv components
	$(VENV)/bin/python -m bench.density $(ARGS) > /dev/null
	$(VENV)/bin/python -m bench.report .local/bench/density.json --out .local/bench/density.md

# The soak (bench/soak.py, issue 29): an hour of the living federation (2 TPs x 2 RPs, two proxy
# replicas, 1,000 kubelets, the control plane, workload churn) under every kind of fault, with
# checkers that fail the run (exit 1): events lost, duplicated or reordered, pods stuck, Leases
# expired, 5xx outside a fault window, replica memory, open files or tasks growing. JSON and a
# PNG in .local/bench/ (add ARGS=--results for bench/results/). ARGS passes flags, e.g.
# make soak ARGS="--minutes 10 --kubelets 500".
soak: venv components
	$(VENV)/bin/python -m bench.soak $(ARGS) > /dev/null

# The Kubernetes e2e suite (k8s.io/kubernetes/test/e2e v1.36.3, README "Conformance"): the API
# machinery specs and the API-only conformance specs, through the proxy and straight at a peer
# cluster in the same run; a per-spec table, exit 1 on a regression. Not part of `make test`
# (e2e.test is the longest build, the run takes most of an hour). ARGS passes flags, e.g.
# make conformance ARGS="--focus 'health handlers' --keep".
conformance: venv
	bash hack/build-components.sh conformance
	$(VENV)/bin/python -m hack.conformance $(ARGS)
