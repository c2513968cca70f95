# One command each on a fresh clone: `make demo` (the main job) and `make test`.
# Both create .venv when it is missing and install the project into it (with the optional
# DGL extra, so the tests exercise the DGL interop and backend).
# The interpreter .venv is built on: the system's CPython 3.11 where it can build a venv,
# else python3.11 or python3 on PATH (`make PY=... test` chooses). Debian's python3.11 is
# built with profile-guided and link-time optimisation; the pyenv build first on PATH on
# these machines has neither: with the same packages, importing the pipeline took ~15 % less
# CPU and a quarter of the suite ~9 % less on Debian's (benchmarks/RESULTS-history.md).
PY ?= $(shell for p in /usr/bin/python3.11 "$$(command -v python3.11)" "$$(command -v python3)"; do \
	[ -x "$$p" ] && "$$p" -c "import ensurepip, venv" 2>/dev/null && { echo "$$p"; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# CPU wheel of torch on these machines; elsewhere see README (CUDA builds).
TORCH ?= torch==2.13.0
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1

.PHONY: demo test test-fast lint typecheck bench clean

# The project's bytecode, written once before the tests (about a second of CPU). Where
# PYTHONDONTWRITEBYTECODE is set (these machines set it), no process caches what it
# compiles, so each of the suite's ~50 Python processes (xdist workers, `dpgnn` children,
# servers, Dask workers) compiled the project's modules again: ~0.5 s of CPU each. Reading
# bytecode is still allowed; compileall writes it whatever the variable says, and a stale
# file is ignored (its source's time and size are checked).
# (-q: only errors are printed, e.g. a syntax error, which also stops the target.)
COMPILE = $(BIN)/python -m compileall -q dpgnn_core tasks flows deployments tests benchmarks
# Beside it, pytest's rewritten test modules (tests/rewrite_cache.py: pytest writes none of
# its own where PYTHONDONTWRITEBYTECODE is set, so each of the suite's pytest processes
# rewrote every module it collected: ~5 s of CPU per process collecting the whole suite).
# And numba's cache of dpgnn's two kernels (dpgnn_core/graph/warm_kernels.py), compiled
# beside the sessions' start (their collection takes longer): a process that reached a
# kernel before any had saved its cache compiled it again (~8 s of CPU for both).

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev,dgl]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/dpgnn demo

# The lint (first: seconds) and the type check (the same checks as `make lint` and `make
# typecheck`), and every test (what CI runs). Two xdist workers on the two cores, each with its
# own project and Prefect home; each worker's queue starts with its long tests
# (tests/conftest.py) and an idle worker takes half of the other's queue (worksteal). A third
# worker cost ~200 s more CPU (its own collection and Prefect server, three processes
# time-slicing two cores) and no longer filled any waiting: 9 min 59 s and 10 min 7 s with
# three, 8 min 43 s to 9 min 49 s with two on fresh clones (benchmarks/RESULTS-history.md).
# mypy (about 26 s of CPU without its cache, as on a fresh clone) runs beside pytest rather
# than before it, at a lower priority (nice 10): it takes the cores when both pytest sessions
# wait, rather than slowing a test that computes. So do the tests marked `waits`, in a
# pytest process of their own that collects only $(WAITS): the tests that wait for a
# schedule to fire by itself (the team's PostgreSQL setup, the work-pool route, the
# one-minute cron, the budget-spending retrain: ~360 s of wall time, most of it waiting for
# the scheduler), three fault tests that mostly wait on a real `dpgnn` child (its server
# killed, its disk filled, a `kill -9` of a sweep), and the warm runner's test (a real
# runner, the commands it forks, a killed client). On an xdist worker each left a core idle
# while it waited (the suite ran at ~150 % of 2 cores); beside the workers their waits
# overlap the workers' computing. (Not the budget-runs-out sweep test: its rerun runs on a
# Dask worker thread of the test process, after which a plain pytest process, unlike an
# xdist worker, hung at exit draining Prefect's log service.) Their reports follow
# pytest's, and any of the three failing fails the target. (Two xdist workers for them,
# with all of test_faults.py, were slower: four processes contending;
# benchmarks/RESULTS-history.md.) tests/test_layout.py checks that every test marked
# `waits` is in $(WAITS), so none is skipped by both runs.
WAITS := tests/deployments tests/team tests/flows/test_faults.py tests/flows/test_warm.py
WAITS_1 := tests/deployments
WAITS_2 := $(filter-out $(WAITS_1),$(WAITS))
test: $(STAMP)
	$(BIN)/ruff check dpgnn_core tasks flows tests benchmarks
	@$(BIN)/python tests/rewrite_cache.py tests 0/2 & $(BIN)/python tests/rewrite_cache.py tests 1/2 & \
	$(COMPILE); compiled=$$?; wait; exit $$compiled
	@log=$$(mktemp); waits=$$(mktemp); waits2=$$(mktemp); \
	DPGNN_TEST_PREFECT_TEMPLATE=$$(mktemp -d); export DPGNN_TEST_PREFECT_TEMPLATE; \
	( nice -n 10 $(BIN)/mypy dpgnn_core tasks flows > $$log 2>&1 ) & types=$$!; \
	( $(BIN)/python -m dpgnn_core.graph.warm_kernels > /dev/null 2>&1 ) & \
	( $(BIN)/python -m pytest -p no:xdist -q -m waits --durations=8 $(WAITS_1) \
		> $$waits 2>&1 ) & \
	waiting=$$!; \
	( $(BIN)/python -m pytest -p no:xdist -q -m waits --durations=8 $(WAITS_2) \
		> $$waits2 2>&1 ) & \
	waiting2=$$!; \
	$(BIN)/python -m pytest -n 2 --dist worksteal -q -m "not waits" --durations=25; tests=$$?; \
	wait $$waiting; waited=$$?; echo "pytest -m waits $(WAITS_1) (beside the run above):"; \
	cat $$waits; wait $$waiting2; waited2=$$?; \
	echo "pytest -m waits $(WAITS_2) (beside the run above):"; cat $$waits2; \
	wait $$types; typed=$$?; echo "mypy dpgnn_core tasks flows:"; cat $$log; \
	rm -rf $$log $$waits $$waits2 $$DPGNN_TEST_PREFECT_TEMPLATE; \
	[ $$tests -eq 0 ] && [ $$waited -eq 0 ] && [ $$waited2 -eq 0 ] && [ $$typed -eq 0 ]

# The inner loop: the tests not marked slow or integration (no servers, clusters, `dpgnn`
# subprocesses or end-to-end flows); no lint or type check.
test-fast: $(STAMP)
	$(COMPILE)
	$(BIN)/python -m pytest -n 2 --dist worksteal -q -m "not slow and not integration" \
		--durations=10

# ruff (with C901: no function above complexity 15) and the size limits (no source file
# above 600 lines; tests/test_code_limits.py, seconds, no Prefect).
lint: $(STAMP)
	$(BIN)/ruff check dpgnn_core tasks flows tests benchmarks
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_code_limits.py

typecheck: $(STAMP)
	$(BIN)/mypy dpgnn_core tasks flows

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf .dpgnn .pytest_cache
