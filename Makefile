# pcops: `make demo` runs the main job, `make test` runs the whole suite. Both set up what they
# need (Debian packages, a pinned .venv, the build) and are idempotent.
SHELL := /bin/bash
VENV ?= $(CURDIR)/.venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
JOBS ?= $(shell nproc)
APT_PACKAGES := build-essential cmake ninja-build git python3 python3-venv python3-dev \
                libgtest-dev libgmock-dev libbenchmark-dev libusb-1.0-0 libgl1 libgomp1 ccache
CMAKE := $(VENV)/bin/cmake
CTEST := $(VENV)/bin/ctest
# The compiler cache of the builds below (CMakeLists.txt, PCOPS_CCACHE), kept with them. One C++
# compiler for all of them (make's CXX: g++ unless given), as the cache tells compilers apart by
# name.
export CCACHE_DIR ?= $(CURDIR)/build/ccache
export CXX

.PHONY: all demo test bench build system venv cpp-test asan-test py-test consumer-test data clean

all: build

system:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

$(VENV)/.stamp: requirements-dev.txt | system
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -r requirements-dev.txt
	touch $@

venv: $(VENV)/.stamp

# The Python package (and its operator library) through scikit-build-core; incremental build dir.
build: venv
	$(PIP) install -q --no-build-isolation --no-deps .

data:
	@$(PY) -m pcops.data --ensure >/dev/null

cpp-test: venv
	$(CMAKE) -S . -B build/cpp -G Ninja -DCMAKE_BUILD_TYPE=Release -DPCOPS_BUILD_TESTS=ON \
	  -DPCOPS_WITH_CUDA=AUTO -DCMAKE_MAKE_PROGRAM=$(VENV)/bin/ninja >/dev/null
	$(CMAKE) --build build/cpp -j $(JOBS)
	# CUDA tests (label cuda) are compiled here and run on a GPU machine: tests/cuda/run_gpu.sh.
	cd build/cpp && $(abspath $(CTEST)) --output-on-failure --no-tests=error -j $(JOBS) -LE cuda

# ASan + UBSan at -O1 with line tables (-g1): what the sanitizers need for their checks and
# symbolized reports, at 2.6x less compile work than -O2 -g (on the 2-core VM from empty: 144
# instead of 377 s, the tests 43 instead of 35 s).
asan-test: venv
	$(CMAKE) -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPCOPS_BUILD_TESTS=ON \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
	  -DPCOPS_SANITIZE=address,undefined -DCMAKE_MAKE_PROGRAM=$(VENV)/bin/ninja >/dev/null
	$(CMAKE) --build build/asan -j $(JOBS)
	cd build/asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(abspath $(CTEST)) --output-on-failure --no-tests=error -j $(JOBS) -LE consumer

py-test: build
	$(PY) -m pytest -q tests/python

test: cpp-test asan-test py-test

demo: build
	$(VENV)/bin/pcops demo

bench: build
	$(VENV)/bin/pcops bench

clean:
	rm -rf build
