# tunefarm: the two entry points of README.md, plus the build they share.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps configure build test demo agent clean

all: build

deps:
	scripts/install-deps.sh

configure: deps
	@if [ ! -f $(BUILD)/build.ninja ]; then \
	  cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo; fi

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Unit and end-to-end tests (GPU tests skip themselves where there is no GPU).
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

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
