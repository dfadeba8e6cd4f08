# tunefarm: the two entry points of README.md, plus the build they share.
BUILD ?= build
JOBS ?= $(shell nproc)
# Extra configure options, e.g. CMAKE_ARGS=-DTUNEFARM_REQUIRE_CUDA=OFF on a
# machine without the CUDA toolkit.
CMAKE_ARGS ?=

.PHONY: all deps configure build test models demo agent clean

all: build

deps:
	scripts/install-deps.sh

configure: deps
	@if [ ! -f $(BUILD)/build.ninja ]; then \
	  cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS); fi

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Unit and end-to-end tests, then the report: counts and every skip with its
# cause. Only "no GPU" may skip (TF_ALLOWED_SKIPS widens that): the models and
# ONNX Runtime the tests compare with are fetched first (npm).
test: build models
	@cd $(BUILD) && rm -f ctest-junit.xml && \
	  ctest --output-on-failure -j $(JOBS) --timeout 600 --output-junit ctest-junit.xml; \
	  rc=$$?; cd $(CURDIR) && \
	  scripts/test-report.py $(BUILD)/ctest-junit.xml $(BUILD)/skips-allowed.txt && exit $$rc

# Pretrained models and ONNX Runtime (scripts/fetch-models.sh; cached).
models:
	@scripts/fetch-models.sh >/dev/null || \
	  echo "make: fetching the models failed; the tests that need them will skip and the report" \
	       "will fail (TF_ALLOWED_SKIPS=no-gpu,no-models accepts that)" >&2

# The main job on loopback: server + worker + agent, a bundled workload set.
demo: build
	scripts/demo.sh $(BUILD)

# The device agent alone, as on a Jetson: make agent BUILD=build-agent
agent:
	scripts/install-deps.sh --agent
	cmake -S . -B $(BUILD) -G Ninja -DTUNEFARM_AGENT_ONLY=ON
	cmake --build $(BUILD) -j $(JOBS)

clean:
	rm -rf $(BUILD)
