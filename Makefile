# Two commands on a fresh machine with Python 3.11: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?= 8501
# the project's own modules, compiled before a start (see `run`)
MODULES := engine catalog planner app pages dashboard.py

.PHONY: run test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Re-install when a requirements file changes.
$(VENV)/.runtime: requirements.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.test: requirements.txt requirements-test.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements-test.txt
	touch $@

# The project's modules compiled first (a no-op when up to date): Python skips writing them where
# PYTHONDONTWRITEBYTECODE is set, and compiling them at every start cost ~190 ms of the cold start.
run: $(VENV)/.runtime
	$(BIN)/python -m compileall -q $(MODULES)
	$(BIN)/python app/serve.py --server.port $(PORT) --server.headless true

# -n auto: one worker process per CPU (pytest-xdist); worksteal evens out the few long tests
# (the modules compiled first, as `make run` does: the tests that start a process or a server import them compiled)
test: $(VENV)/.test
	$(BIN)/ruff check .
	$(BIN)/python -m compileall -q $(MODULES)
	$(BIN)/python -m pytest -n auto --dist worksteal

# --no-deps: llm-analysis pins huggingface_hub<0.15 and transformers<5, which would downgrade the
# planner's own huggingface_hub (>=0.23) in this venv; it imports both only to fetch configs
# from the Hub, which the benchmark never does (it builds ModelConfig itself).
$(VENV)/.bench: requirements-bench.txt | $(VENV)/.test
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-bench.txt
	touch $@

# Page latency, then engine throughput vs the peer llm-analysis, whose summary is the last
# line printed (docs/performance.md).
bench: $(VENV)/.test $(VENV)/.bench
	$(BIN)/python benchmarks/bench_properties.py --hypothesis 200 --recipes all
	$(BIN)/python benchmarks/bench_pages.py
	$(BIN)/python benchmarks/bench_engine.py

clean:
	rm -rf $(VENV) catalog/build .pytest_cache
