# Thin entry points; each target is one idea.  `make run` and `make test`
# work on a fresh Debian 12 machine as root: they install what is missing.

VENV   := .venv
PY     := $(VENV)/bin/python
TIERS  := $(VENV)/bin/tiers
JOBS   ?= 2

.PHONY: setup build run test test-c test-asan test-py test-mpich bench bench-quick fuzz clean

# System packages and the Python virtual environment (idempotent).
setup:
	@bash scripts/install-deps.sh

# Build the native core with CMake through pip (scikit-build-core) and install
# the package, its console command and native tools into the venv.
build: setup
	@CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(PY) -m pip install -q --no-build-isolation --no-deps .

# The main job: a survey of this machine.
run: build
	$(TIERS) survey

# Every test: C units, C units under ASan+UBSan, pytest, then the MPI tests
# under MPICH.
test: test-c test-asan test-py test-mpich

test-c: build
	ctest --test-dir build/release --output-on-failure -j $(JOBS)

test-asan: setup
	@cmake -S . -B build/asan -DTIERS_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DTIERS_WERROR=ON >/dev/null
	@cmake --build build/asan -j $(JOBS) >/dev/null
	ctest --test-dir build/asan --output-on-failure -j $(JOBS)

# The messaging layer's MPI checks also run against the ASan build when
# test-asan has made it (expanded when the recipe runs, after test-asan).
MBC_ASAN := $(CURDIR)/build/asan/native/src/mbc/tiers-mbc-check
MBC_MPI_ASAN := $(CURDIR)/build/asan/native/src/mbcmpi/libtiers-mbc-mpi.so

test-py: build
	TIERS_MBC_ASAN_CHECK=$(wildcard $(MBC_ASAN)) TIERS_MBC_MPI_ASAN_LIB=$(wildcard $(MBC_MPI_ASAN)) \
	  $(PY) -m pytest -q

# The MPI tests again with MPICH: the native parts built with
# -DTIERS_MPI=mpich into build/mpich, installed to build/mpich-inst, run under
# Hydra's mpiexec (tests that check Open MPI's own behaviour skip, saying
# why: tests/test_mpich.py).  Needs `build` for the Open MPI trace compared
# with MPICH's.
MPICH_PREFIX := $(CURDIR)/build/mpich-inst
MPICH_TESTS  := tests/test_mpich.py tests/test_trace_pcoll.py tests/test_trace_fortran_idup.py tests/test_trace_nbr.py tests/test_trace_coverage.py tests/test_trace_mpi4.py tests/test_hybrid.py tests/test_probe_net.py \
                tests/test_mbc.py::test_check_passes

test-mpich: build
	@cmake -S . -B build/mpich -DTIERS_MPI=mpich -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build build/mpich -j $(JOBS) >/dev/null
	@cmake --install build/mpich --prefix $(MPICH_PREFIX) >/dev/null
	TIERS_NATIVE_DIR=$(MPICH_PREFIX) TIERS_LAUNCHER=mpich TIERS_MBC_ASAN_CHECK= \
	  $(PY) -m pytest -q -rs $(MPICH_TESTS)

# Side-by-side benchmarks against their anchors (slow; not part of test).
# Every script runs with the venv first on PATH (the installed tiers and its
# native tools); each ends with a line giving its time, the run with the total,
# and the ones that failed are named and make the run fail.
# BENCH picks scripts by folder name (BENCH="trace_* sync_vs_epcc");
# BENCH_ARGS adds options to every script (BENCH_ARGS=--dry-run checks that
# each starts and says what it would run, measuring nothing).
BENCH      ?= *
BENCH_ARGS ?=

define bench_all
@failed=; n=0; t0=$$(date +%s); \
for b in $(patsubst %,bench/%/run,$(BENCH)); do \
  [ -x "$$b" ] || { echo "$@: no script $$b"; failed="$$failed $$b"; continue; }; \
  echo "== $$b$(if $(1), $(1))"; s=$$(date +%s); n=$$((n + 1)); \
  if PATH=$(CURDIR)/$(VENV)/bin:$$PATH $$b $(1); then r=ok; \
  else r="FAILED (exit $$?)"; failed="$$failed $$b"; fi; \
  echo "== $$b$(if $(1), $(1)): $$r ($$(($$(date +%s) - s)) s)"; \
done; \
echo "== $@: $$n scripts in $$(($$(date +%s) - t0)) s"; \
if [ -n "$$failed" ]; then echo "$@: failed:$$failed"; exit 1; fi
endef

bench: build
	$(call bench_all,$(strip $(BENCH_ARGS)))

# The same scripts at reduced size and rounds (--quick: about a minute each,
# under 10 minutes in all); a script that cannot run here says why and skips.
bench-quick: build
	$(call bench_all,$(strip --quick $(BENCH_ARGS)))

# libFuzzer harnesses of the C parsers (native/fuzz/), FUZZ_SECONDS each,
# starting from the corpus kept in native/fuzz/corpus; any finding fails.
FUZZ_SECONDS ?= 60

fuzz: setup
	FUZZ_SECONDS=$(FUZZ_SECONDS) native/fuzz/run.sh

clean:
	rm -rf build
