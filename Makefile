# dgpu front door: make deps | build | test | run | bench | fmt | fmt-check | lint
PRESET ?= release
BUILD_DIR := $(if $(filter release,$(PRESET)),build,build-$(PRESET))
JOBS ?= $(shell nproc)

.PHONY: all deps configure build test run bench fmt fmt-check lint clean

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

run: deps build
	bash scripts/run-local-cluster.sh

bench: build
	bash scripts/run-benchmarks.sh

fmt:
	git ls-files '*.cc' '*.h' | xargs clang-format -i

# Fails, naming each file and line, when a C++ file is not as `make fmt` would leave it.
fmt-check:
	git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror

lint: configure
	git ls-files 'src/*.cc' 'sim/*.cc' | xargs clang-tidy -p $(BUILD_DIR) --quiet

clean:
	rm -rf build build-debug build-asan
