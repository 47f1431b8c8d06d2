# rollout-dataset: every command a user or CI runs. `make demo` and `make test` are the quickstart.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
NPM_TOOLS := .npm-tools
OPENCODE_VERSION ?= 1.18.33
# keep in step with rollout_dataset/harness/codex.py CODEX_VERSION
CODEX_VERSION ?= 0.171.0
# keep in step with rollout_dataset/harness/claude_code.py CLAUDE_CODE_VERSION
CLAUDE_CODE_VERSION ?= 2.1.328

.PHONY: all venv reader-venv install install-test npm-tools system-deps demo test test-fast test-real-vllm bench clean

all: test

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# The package and its runtime dependencies.
$(VENV)/.installed: $(PY) pyproject.toml
	$(PIP) install --quiet -e .
	touch $@

# The package with its test extras (openai SDK, mini-swe-agent, scipy, ...).
$(VENV)/.installed-test: $(PY) pyproject.toml
	$(PIP) install --quiet -e ".[test]"
	touch $(VENV)/.installed $@

# Third-party harnesses from the npm registry that the tests drive for real (opencode, Codex CLI;
# Codex's native binary comes in its npm package @openai/codex-linux-x64, Claude Code's in
# @anthropic-ai/claude-code-linux-x64: no download at run time).
NPM_STAMP := $(NPM_TOOLS)/.installed-opencode-$(OPENCODE_VERSION)-codex-$(CODEX_VERSION)-claude-code-$(CLAUDE_CODE_VERSION)
$(NPM_STAMP):
	mkdir -p $(NPM_TOOLS)
	npm install --silent --no-audit --no-fund --prefix $(NPM_TOOLS) opencode-ai@$(OPENCODE_VERSION) \
		@openai/codex@$(CODEX_VERSION) @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION)
	touch $@

# System tools the sandbox needs (Debian packages): bubblewrap builds the allow-list root untrusted
# code runs in, socat carries the recording proxy's port into an external harness's sandbox.
# Installed only when missing (sudo when not root).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
system-deps:
	@command -v bwrap >/dev/null && command -v socat >/dev/null || \
		{ $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq bubblewrap socat; }

# A reader's environment: only what a user of the published dataset has (datasets, huggingface_hub,
# tokenizers), never this package. The card's snippets and the Hub-copy test run in it.
READER_VENV := .venv-reader
$(READER_VENV)/.installed:
	$(PYTHON) -m venv $(READER_VENV)
	$(READER_VENV)/bin/pip install --quiet --upgrade pip
	$(READER_VENV)/bin/pip install --quiet datasets huggingface_hub tokenizers
	touch $@

venv: $(PY)
reader-venv: $(READER_VENV)/.installed
install: $(VENV)/.installed
install-test: $(VENV)/.installed-test
npm-tools: $(NPM_STAMP)

# The main job on the embedded default: local backend, oracle captures, dataset build, load back.
demo: install system-deps
	$(PY) -m rollout_dataset.demo

# The whole test suite, as CI runs it.
test: install-test npm-tools system-deps reader-venv
	$(PY) -m pytest -q -p no:cacheprovider

# Opt-in: wire-format checks against a genuine vLLM CPU server (see ../shared/tools/real-vllm).
test-real-vllm: install-test
	REAL_VLLM_URL=$${REAL_VLLM_URL:?set REAL_VLLM_URL=http://127.0.0.1:18000/v1} $(PY) -m pytest -q -m real_vllm

# Benchmarks: scripts that print and save figures to bench/results/ (never timed tests).
bench: install-test
	$(PY) bench/proxy_overhead.py
	$(PY) bench/graph_export.py
	$(PY) bench/dataset_build.py
	$(PY) bench/batch_throughput.py
	$(PY) bench/crafter_rollout.py
	$(PY) bench/sandbox_overhead.py
	$(PY) bench/redaction.py
	$(PY) bench/proxy_faults.py
	$(PY) bench/proxy_memory.py
	$(PY) bench/build_integrity.py
	$(PY) bench/context_fit_overhead.py
	$(PY) bench/on_policy.py
	$(PY) bench/compaction.py

clean:
	rm -rf $(VENV) $(READER_VENV) $(NPM_TOOLS) demo-dataset demo-artifacts
