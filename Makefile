# The two commands a newcomer runs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test demo bench fuzz clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

test: venv
	$(PY) -m pytest tests

demo: venv
	$(PY) -m rlinks_rllib demo

bench: venv
	$(PY) benchmarks/bench_codec.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis benchmarks/out
