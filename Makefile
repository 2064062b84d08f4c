# The verbs of shardline: setup, test, lint, bench, soak, local, dashboard, status, send, synth, deploy, clean.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION = 20

.DEFAULT_GOAL := help
.PHONY: help setup browser test lint bench soak local dashboard status send synth deploy clean

help:
	@echo "make setup   create .venv (pinned Python deps) and node_modules (pinned Node tools)"
	@echo "make test    ruff, mypy (strict, the library), then pytest; PYTEST_ARGS=... to filter"
	@echo "             (installs Debian's chromium for the dashboard's browser tests if it is missing)"
	@echo "make lint    ruff and mypy only"
	@echo "make bench   run the benchmarks (python -m bench, python -m bench.consumer_cost)"
	@echo "make soak    1,000,000 records under heavy chaos, kills every 10 invocations: verdict, memory (SOAK_ARGS=...)"
	@echo "make local   run the app on loopback from the synthesized template (LOCAL_ARGS=--no-limits ...)"
	@echo "make dashboard  open the running app's dashboard and alarms (http://127.0.0.1:3000/_dashboard)"
	@echo "make status  what the running app holds: shards, consumer groups, DLQs, functions"
	@echo "make send    POST records to the local API and check every consumer group (SEND_ARGS=--count 20000)"
	@echo "make synth   synthesize the CDK app offline into cdk.out/ (cdk-nag runs on every synth)"
	@echo "make deploy  deploy the CDK app to the account of your AWS credentials (STAGE=prod for another stage)"
	@echo "make clean   remove .venv, node_modules, cdk.out and tool caches"

setup: $(VENV)/.stamp node_modules/.stamp

$(VENV)/.stamp: requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

node_modules/.stamp: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# Debian's Chromium for the dashboard's browser tests (driven by playwright-core from npm).
browser:
	@command -v chromium >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium; }

test: setup browser
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.stamp
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

bench: setup
	$(PY) -m bench
	$(PY) -m bench.consumer_cost

# The synthesized app is rebuilt only when a source it is made of changed.
APP_SOURCES := app.py cdk.json $(shell find infra functions layers/shardline -name '*.py' -not -path '*/__pycache__/*' 2>/dev/null)

cdk.out/manifest.json: $(APP_SOURCES) | setup
	CDK_DISABLE_VERSION_CHECK=1 node_modules/.bin/cdk synth --no-notices --quiet
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

synth: setup
	CDK_DISABLE_VERSION_CHECK=1 node_modules/.bin/cdk synth --no-notices --quiet

deploy: setup
	node_modules/.bin/cdk deploy --no-notices $(if $(STAGE),-c stage=$(STAGE))

clean:
	rm -rf $(VENV) node_modules cdk.out .local .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
