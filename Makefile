# dgpu front door: make deps | build | test | test-asan | test-tsan | fuzz | run | bench | fmt | fmt-check |
# tidy | lint-api | lint
SHELL := /bin/bash
PRESET ?= release
BUILD_DIR := $(if $(filter release,$(PRESET)),build,build-$(PRESET))
JOBS ?= $(shell nproc)

.PHONY: all deps configure build test test-asan test-tsan fuzz run bench bench-floors fmt fmt-check tidy lint-api lint clean

all: build

deps:
	bash scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake --preset $(PRESET)

configure: $(BUILD_DIR)/build.ninja

build: configure
	cmake --build --preset $(PRESET) -j $(JOBS)

test: build
	ctest --preset $(PRESET) -j $(JOBS)

# The C++ unit tests (ctest label "unit") built with AddressSanitizer and UBSan (build-asan); the
# test preset sets ASAN_OPTIONS and UBSAN_OPTIONS so that the first report fails the test.
test-asan:
	cmake --preset asan
	cmake --build --preset asan -j $(JOBS)
	ctest --preset asan -j $(JOBS)

# libFuzzer targets (fuzz/), built in the asan build (build-asan: clang, AddressSanitizer and
# UBSan, with libFuzzer's coverage instrumentation), each run for FUZZ_SECONDS on a scratch copy
# of its seed corpus fuzz/corpus/<target>/ (the seeds are only read). A crash, a sanitizer report
# or a leak fails the run and leaves the input in build-asan/fuzz-artifacts/.
FUZZ_SECONDS ?= 30
FUZZ_TARGETS := fuzz_rest fuzz_config fuzz_auth fuzz_stored fuzz_text
FUZZ_DIR := build-asan
fuzz:
	cmake --preset asan
	cmake --build --preset fuzz -j $(JOBS)
	mkdir -p $(FUZZ_DIR)/fuzz-artifacts
	set -e; for t in $(FUZZ_TARGETS); do \
	  rm -rf $(FUZZ_DIR)/fuzz-corpus/$$t; mkdir -p $(FUZZ_DIR)/fuzz-corpus/$$t; \
	  echo "== $$t ($(FUZZ_SECONDS) s)"; \
	  $(FUZZ_DIR)/bin/$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	    -max_len=65536 -print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/fuzz-artifacts/$$t- \
	    $(FUZZ_DIR)/fuzz-corpus/$$t fuzz/corpus/$$t 2>&1 | \
	    grep -E "^(INFO: Seed|#[0-9]+ +DONE|stat::number_of_executed_units|==[0-9]+==|SUMMARY)" ; \
	  test "$${PIPESTATUS[0]}" -eq 0; \
	done

# The daemon binaries built with ThreadSanitizer (build-tsan) under the integration and HA suites
# (ctest labels "integration" and "ha"). Reports go to build-tsan/tsan-reports/; tests/pylib/tsan_triage.py
# fails the target on any report in dgpu's own code (and prints it), as a failed test does.
TSAN_REPORTS := build-tsan/tsan-reports
test-tsan:
	cmake --preset tsan
	cmake --build --preset tsan -j $(JOBS)
	rm -rf $(TSAN_REPORTS) && mkdir -p $(TSAN_REPORTS)
	status=0; ctest --preset tsan -j $(JOBS) || status=$$?; \
	  python3 tests/pylib/tsan_triage.py $(TSAN_REPORTS) || status=1; exit $$status

run: deps build
	bash scripts/run-local-cluster.sh

bench: build
	bash scripts/run-benchmarks.sh

# The floors of docs/benchmarks.md, this build paired against BASE's in one run (default: the
# commit before HEAD); FLOORS and ROUNDS choose what runs (scripts/bench-floors.sh).
BASE ?= HEAD~1
bench-floors: build
	bash scripts/bench-floors.sh $(BASE)

fmt:
	git ls-files '*.cc' '*.h' | xargs clang-format -i

# Fails, naming each file and line, when a C++ file is not as `make fmt` would leave it.
fmt-check:
	git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror

# clang-tidy with the repository's .clang-tidy (every kept check is an error) over dgpu's sources
# through the compile database. Needs the build for the generated
# protobuf headers.
TIDY_SOURCES := '^$(CURDIR)/(src/(base|common|core|store|scheduler|agent|ctl)|sim)/[^/]+\.cc$$'
# Each file is checked again only when its source, a header it includes, its flags, .clang-tidy
# or clang-tidy changed since it last passed (scripts/tidy-cached.py; cache in ~/.cache/dgpu/tidy,
# DGPU_TIDY_CACHE chooses another).
tidy: build
	python3 scripts/tidy-cached.py $(BUILD_DIR) $(TIDY_SOURCES) $(JOBS)

# The OpenAPI description (api/openapi.yaml) linted by @redocly/cli, pinned by
# tools/package-lock.json and installed under tools/node_modules (git-ignored) by `npm ci`; the
# rules are in api/redocly.yaml.
REDOCLY := tools/node_modules/.bin/redocly
# The stamp tells scripts/install-deps.sh which lock file is installed.
$(REDOCLY): tools/package.json tools/package-lock.json
	npm ci --prefix tools --no-audit --no-fund
	cp tools/package-lock.json tools/node_modules/.dgpu-installed-lock
	touch $@

lint-api: $(REDOCLY)
	$(REDOCLY) lint --config api/redocly.yaml api/openapi.yaml

lint: tidy lint-api

clean:
	rm -rf build build-debug build-asan build-tsan build-fuzz
