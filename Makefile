# Every target creates .venv with python3 when it is missing; nothing needs installing by hand.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: demo test test-fast bench bench-avx2 clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,keras,lightning]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/profiler demo --out runs/demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

# the deterministic layer (no subprocesses, no training runs): under a minute
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m 'not slow'

bench: $(STAMP)
	$(BIN)/python -m benchmarks

# on an AVX-512 host: the kernels and steps as an AVX2 machine runs them, PyTorch held to AVX2 too
bench-avx2: $(STAMP)
	$(BIN)/python -m benchmarks --emulate avx2 --only kernels,engine --out docs/benchmarks-avx2-emulated.md

clean:
	rm -rf $(VENV) runs .pytest_cache
