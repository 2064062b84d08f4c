# The verbs of shardline: setup, lock, test, lint, unit, bench, cost, soak, local, dashboard, status, send, synth, deploy, clean.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
LAMBDA_RUNTIME := .local/lambda
# `make deploy`'s own venv: the runtime lock only (requirements.lock), none of the test tools.
DEPLOY_VENV := .deploy-venv
DEPLOY_PY := $(DEPLOY_VENV)/bin/python

# Every Node use runs on the Node package-lock.json pins (node-linux-<arch>, an LTS line still
# maintained; `npm ci` brings it, any Node >= 20 bootstraps): the cdk CLI below, jsii's kernel under
# Python (JSII_NODE, which jsii reads when it starts its kernel), the tests' kinesis-mock and browser
# script (tests/support/node.py). Elsewhere than Linux x64/arm64: `make NODE=node ...`.
NODE := node_modules/.bin/node
CDK := CDK_DISABLE_VERSION_CHECK=1 $(NODE) node_modules/aws-cdk/bin/cdk
export JSII_NODE := $(if $(findstring /,$(NODE)),$(abspath $(NODE)),$(NODE))

.DEFAULT_GOAL := help
.PHONY: help setup lock browser test lint unit bench cost soak local dashboard status send synth dist deploy clean

help:
	@echo "make setup   create .venv from requirements-dev.lock (every package pinned, hashes checked)"
	@echo "             and node_modules from package-lock.json (pinned Node tools)"
	@echo "make lock    regenerate requirements.lock and requirements-dev.lock from requirements*.txt"
	@echo "             (keeps the locked versions; LOCK_ARGS=--upgrade or --upgrade-package NAME to move them)"
	@echo "make test    the lint gates (make lint), pytest on every core, then bench --check; PYTEST_ARGS=... to filter"
	@echo "             (installs Debian's chromium for the dashboard's browser tests if it is missing)"
	@echo "make lint    ruff (lint, format, complexity), mypy (strict: library, infra, app.py, bench, local), lint-imports"
	@echo "make unit    the fast suites only: tests/unit and tests/docs (well under a minute)"
	@echo "make bench   run the benchmarks (python -m bench, bench.consumer_cost, bench.worker_invoke)"
	@echo "make cost    what a million records cost, shardline against the usual build, per component (COST_ARGS=--quick)"
	@echo "make soak    1,000,000 records under heavy chaos, kills every 10 invocations: verdict, memory (SOAK_ARGS=...)"
	@echo "make local   run the app on loopback from the synthesized template (LOCAL_ARGS=--no-limits ...)"
	@echo "make dashboard  open the running app's dashboard and alarms (http://127.0.0.1:3000/_dashboard)"
	@echo "make status  what the running app holds: shards, consumer groups, DLQs, functions"
	@echo "make send    POST records to the local API and check every consumer group (SEND_ARGS=--count 20000)"
	@echo "make synth   synthesize the CDK app offline into cdk.out/ (cdk-nag runs on every synth)"
	@echo "make dist    build the wheel and the sdist into dist/, checked as a registry checks an upload"
	@echo "make deploy  deploy the CDK app to the account of your AWS credentials (STAGE=prod for another stage);"
	@echo "             synthesized by .deploy-venv, made from requirements.lock alone (no test tools)"
	@echo "make clean   remove .venv, .deploy-venv, node_modules, cdk.out and tool caches"

setup: $(VENV)/.stamp node_modules/.stamp $(LAMBDA_RUNTIME)/.stamp

# Installs exactly the dev lock: every package pinned, every file's hash checked, nothing unlisted
# (--no-deps: a dependency missing from the lock fails `pip check` instead of being fetched).
$(VENV)/.stamp: requirements.lock requirements-dev.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --require-hashes --no-deps -r requirements-dev.lock
	$(PY) -m pip check
	touch $@

# The locks are generated from the human-edited inputs (requirements.txt: runtime and CDK, what is
# deployed and synthesized; requirements-dev.txt: that plus the test tools) by uv, itself pinned and
# installed in its own venv (.locktool), never in .venv. One universal resolution for every platform
# and Python >= 3.11, with the hash of every file of each pinned version; existing pins are kept
# unless LOCK_ARGS says otherwise. The runtime lock is resolved within the dev lock (same versions).
# The worker image's lock (shardline/cdk/worker_image/requirements.lock, package data) is cut from both.
LOCK_TOOL := uv==0.13.9
LOCKTOOL := .locktool
LOCKTOOL_STAMP := $(LOCKTOOL)/.stamp-$(subst ==,-,$(LOCK_TOOL))
LOCK_ARGS ?=
LOCK_COMPILE = $(LOCKTOOL)/bin/uv pip compile --quiet --universal --python-version 3.11 --generate-hashes \
	--custom-compile-command "make lock" $(LOCK_ARGS)

$(LOCKTOOL_STAMP):
	test -x $(LOCKTOOL)/bin/python || $(PYTHON) -m venv $(LOCKTOOL)
	$(LOCKTOOL)/bin/python -m pip install --quiet $(LOCK_TOOL)
	touch $@

lock: $(LOCKTOOL_STAMP)
	$(LOCK_COMPILE) requirements-dev.txt -o requirements-dev.lock
	$(LOCK_COMPILE) requirements.txt -c requirements-dev.lock -o requirements.lock
	$(PYTHON) workers/lock.py

# What Lambda gives a function besides its code, for the local runtime's workers: each Python
# runtime's own packages (boto3 ...) and the public Powertools layer, pinned from the dev lock with
# hashes checked, into .local/lambda (local/lambda_/runtimes.py). A function imports nothing else.
$(LAMBDA_RUNTIME)/.stamp: requirements-dev.lock local/lambda_/runtimes.py $(VENV)/.stamp
	$(PY) -m local.lambda_.runtimes install
	touch $@

node_modules/.stamp: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# Debian's Chromium for the dashboard's browser tests (driven by playwright-core from npm).
browser:
	@command -v chromium >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium; }

# The gates every change passes: lint, format, strict types (pyproject's [tool.mypy] files), and the import layers
# (pyproject's [tool.importlinter]: bench over local and infra, both over the library, its own layers).
LINT = $(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/mypy \
	&& PYTHONPATH=layers/shardline/python:. $(VENV)/bin/lint-imports --no-cache

# The suite spreads over the cores (pyproject's addopts: pytest-xdist) and ends with its 25 slowest
# tests and each folder's total; then `bench --check` prints every benchmark row against the
# README's. Not yet a gate (the leading `-`): on this VM three full runs within an hour put the
# same ratio 30-45 % apart, beyond its 20 % rule; it gates once the README publishes medians.
test: setup browser
	$(LINT)
	$(PY) -m pytest --durations=25 $(PYTEST_ARGS)
	-$(PY) -m bench --check

lint: $(VENV)/.stamp
	$(LINT)

# The fast suites (the library's unit tests and the README's examples): well under a minute.
unit: $(VENV)/.stamp
	$(PY) -m pytest tests/unit tests/docs -q $(PYTEST_ARGS)

bench: setup
	$(PY) -m bench
	$(PY) -m bench.consumer_cost
	$(PY) -m bench.worker_invoke

COST_ARGS ?=
cost: setup
	$(PY) -m bench.cost $(COST_ARGS)

# The synthesized app is rebuilt only when a source it is made of changed.
APP_SOURCES := app.py cdk.json $(shell find infra functions layers/shardline -name '*.py' -not -path '*/__pycache__/*' 2>/dev/null)

cdk.out/manifest.json: $(APP_SOURCES) | setup
	$(CDK) synth --no-notices --quiet
	touch $@

# A million 100-byte records make about 130 invocations per consumer group: kills every 10, not 150.
SOAK_ARGS ?= --kill-every 10
soak: setup cdk.out/manifest.json
	$(PY) -m bench.soak $(SOAK_ARGS)

local: setup cdk.out/manifest.json
	$(PY) -m local up $(LOCAL_ARGS)

DASHBOARD_URL = http://127.0.0.1:$(or $(API_PORT),3000)/_dashboard
dashboard:
	@echo "the dashboard of the running app (make local): $(DASHBOARD_URL)"
	@$(PYTHON) -m webbrowser -t $(DASHBOARD_URL) >/dev/null 2>&1 || true

status: $(VENV)/.stamp
	$(PY) -m local status $(STATUS_ARGS)

send: $(VENV)/.stamp
	$(PY) -m local send $(SEND_ARGS)

# The wheel and the sdist, built with the locked setuptools (no isolated build: offline) and checked
# as a package index checks an upload (twine check --strict: metadata, the README as its page).
dist: $(VENV)/.stamp
	rm -rf dist
	$(PY) -m build --no-isolation --outdir dist .
	$(PY) -m twine check --strict dist/*

synth: setup
	$(CDK) synth --no-notices --quiet

# What is deployed is synthesized by an interpreter holding the runtime lock alone (what app.py and
# shardline.cdk import: aws-cdk-lib, constructs, cdk-nag, boto3 ...), hash-checked, nothing unlisted,
# never the dev lock's test tools; the Node side is the cdk CLI alone.
$(DEPLOY_VENV)/.stamp: requirements.lock
	test -x $(DEPLOY_PY) || $(PYTHON) -m venv $(DEPLOY_VENV)
	$(DEPLOY_PY) -m pip install --quiet --require-hashes --no-deps -r requirements.lock
	$(DEPLOY_PY) -m pip check
	touch $@

deploy: $(DEPLOY_VENV)/.stamp node_modules/.stamp
	$(CDK) deploy --no-notices --app "$(DEPLOY_PY) app.py" $(if $(STAGE),-c stage=$(STAGE))

clean:
	rm -rf $(VENV) $(DEPLOY_VENV) $(LOCKTOOL) node_modules cdk.out .local .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
