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
DEFAULT_MODEL := $(BUILD_DIR)/models/deepseek_v3-tiny

# Debian packages for the build, the engine and the tests.
APT_PACKAGES := build-essential cmake ninja-build pkg-config python3-venv \
  nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev \
  libpcre2-dev libcpp-httplib-dev libdnnl-dev ocl-icd-opencl-dev opencl-c-headers \
  clang libclang-rt-14-dev libicu-dev

.PHONY: setup build test run fuzz format clean unit-test py-test

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

# The main job: make the tiny default model with transformers, describe it, and serve a batch of
# requests through the engine (continuous batching, chunked prefill, prefix caching).
run: build $(DEFAULT_MODEL)/config.json
	$(BUILD_DIR)/latent info --model $(DEFAULT_MODEL)
	$(BUILD_DIR)/latent generate --model $(DEFAULT_MODEL) --prompts tools/demo_prompts.jsonl \
	  --max-batch-tokens 64 --block-tokens 16

$(DEFAULT_MODEL)/config.json: tools/make_tiny_model.py | $(STAMPS)/venv
	$(PY) tools/make_tiny_model.py --preset deepseek_v3 --out $(DEFAULT_MODEL) --seed 0 > /dev/null

# libFuzzer targets, built with clang under ASan/UBSan, each run for FUZZ_SECONDS.
fuzz: setup
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD_DIR) -G Ninja -DLATENT_FUZZ=ON \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS)
	tests/fuzz/run_fuzzers.sh $(FUZZ_BUILD_DIR) $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD_DIR) $(FUZZ_BUILD_DIR) $(STAMPS)
