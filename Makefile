# dgpu front door: make deps | build | test | test-asan | test-tsan | run | bench | fmt | fmt-check |
# tidy | lint-api | lint
PRESET ?= release
BUILD_DIR := $(if $(filter release,$(PRESET)),build,build-$(PRESET))
JOBS ?= $(shell nproc)

.PHONY: all deps configure build test test-asan test-tsan run bench fmt fmt-check tidy lint-api lint clean

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

fmt:
	git ls-files '*.cc' '*.h' | xargs clang-format -i

# Fails, naming each file and line, when a C++ file is not as `make fmt` would leave it.
fmt-check:
	git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror

# clang-tidy with the repository's .clang-tidy (every kept check is an error) over dgpu's sources
# through the compile database. Needs the build for the generated
# protobuf headers.
TIDY_SOURCES := '^$(CURDIR)/(src/(base|common|core|store|scheduler|agent|ctl)|sim)/[^/]+\.cc$$'
tidy: build
	run-clang-tidy -p $(BUILD_DIR) -j $(JOBS) -quiet $(TIDY_SOURCES)

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
	rm -rf build build-debug build-asan build-tsan
