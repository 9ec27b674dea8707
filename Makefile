# qwenref: `make run` executes the notebooks (copies, into build/), `make test` runs every CPU
# check CI runs. Both set up .venv themselves on a fresh machine; nothing else is needed
# beyond python3 (>= 3.11) with venv, and nvcc if the kernel compile check should not skip.

PYTHON ?= python3
VENV   ?= .venv
# oracle = torch + transformers, for the tests that compare against transformers' layer; drop
# it (make test EXTRAS=tests,notebooks) where torch==2.13.0 is not at hand: those tests skip.
EXTRAS ?= tests,notebooks,oracle
PY     := $(VENV)/bin/python
comma  := ,
# reinstall only when pyproject.toml is newer than the last install of these extras
STAMP  := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

NOTEBOOKS := $(wildcard notebooks/*.ipynb)

.PHONY: run test setup demo compile-check gpu-refresh sanitize clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@echo "setting up $(VENV): pip install -e \".[$(EXTRAS)]\" (a few minutes the first time)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

# Notebooks exist -> execute copies into build/ and render HTML; none yet -> the golden demo.
run: $(STAMP)
ifneq ($(NOTEBOOKS),)
	$(PY) -m qwenref.notebooks
else
	@echo "no notebooks/*.ipynb yet: running the golden-model demo instead"
	$(PY) -m qwenref.demo
endif

demo: $(STAMP)
	$(PY) -m qwenref.demo

# The style checks (ruff for Python, clang-format for CUDA: one style, configured in
# pyproject.toml and .clang-format) go first. The compile check (every kernel for every target,
# then each file as it is on disk: nvcc, bound by the CPU) runs beside the tests that do not read
# its builds, its report kept in build/compile_check.log and printed when both are done; then
# tests/test_kernels_compile.py reads its cache. The two pytest runs each end on their summary
# line (--durations names the slowest tests); the target fails if any of the three does.
# Notebooks are checked with nbval in lax mode: every cell must run without error; only cells
# marked `# NBVAL_CHECK_OUTPUT` must reproduce their committed output.
test: $(STAMP)
	$(PY) -m ruff check qwenref tests
	$(PY) -m ruff format --check qwenref tests
	$(VENV)/bin/clang-format --dry-run -Werror kernels_cuda/*.cu kernels_cuda/*.cuh
	@mkdir -p build
	$(PY) -m qwenref.gpu.compile_check > build/compile_check.log 2>&1 & cc=$$!; \
	$(PY) -m pytest -q --durations=10 tests/ --ignore=tests/test_kernels_compile.py \
	    $(if $(NOTEBOOKS),--nbval-lax --nbval-current-env notebooks/); tests=$$?; \
	wait $$cc; check=$$?; cat build/compile_check.log; \
	$(PY) -m pytest -q tests/test_kernels_compile.py; built=$$?; \
	test $$tests = 0 && test $$check = 0 && test $$built = 0

compile-check: $(STAMP)
	$(PY) -m qwenref.gpu.compile_check

# The deliberate GPU step, on a machine with CuPy and a GPU (no venv: it runs $(PYTHON) with
# the packages installed there): GPU tests first (no point timing a wrong
# kernel), then the benchmark into results/, then the notebooks executed IN PLACE so their
# committed outputs come from a GPU run (a failing one is not written back). The bench refuses
# to record without QWENREF_COMMIT=<sha of the commit being measured>.
gpu-refresh:
	$(PYTHON) -m pytest -q -m gpu tests/
	$(PYTHON) -m qwenref.bench
	$(PYTHON) -m qwenref.status
	$(PYTHON) -m qwenref.notebooks --in-place

# The GPU tests under compute-sanitizer, one tool per run (a GPU machine, no venv, like
# gpu-refresh): make sanitize TOOL=memcheck|racecheck|initcheck|synccheck. CuPy's memory pool
# is off and kernels carry line info; the summary goes into results/sanitizer-<device>.json
# (one entry per tool, merged; needs QWENREF_COMMIT=<sha> where there is no .git), and nothing
# is written when the run did not start. The sanitizer slows each kernel 10-100x, so the
# default run is short: SELECT=quick runs each test function with every value of each parameter
# once (about 40% of the stage tests; every rung, cache kind and shape value still runs), and
# BUDGET=450 skips the tests that would start after 450 s (counted as budget_skipped). SELECT=all
# with SHARD=1/3, 2/3, 3/3 (three runs, which may go side by side) runs everything;
# K="norm or wht" narrows to tests matching a pytest -k expression.
TOOL   ?= memcheck
SELECT ?= quick
BUDGET ?= 450
sanitize:
	$(PYTHON) -m qwenref.dev.sanitize --tool $(TOOL) --select $(SELECT) --budget $(BUDGET) \
	    $(if $(K),-k "$(K)") $(if $(SHARD),--shard $(SHARD))

clean:
	rm -rf build/ *.egg-info .pytest_cache
