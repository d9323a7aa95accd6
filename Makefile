# The two commands a newcomer runs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test test-long multihost test-multihost-async demo bench fuzz clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[rllib,dev]'
	touch $(STAMP)

# Everything, the five-host suite included (tests/test_multihost.py: about
# 5 min as root; without root or iproute2 it skips and says why).
test: venv
	$(PY) -m pytest tests

# Training runs to the issues' full targets (the teacher under PPO and DQN) and IMPALA's SIGTERM while its
# simulators are silent, kept out of `make test`'s 25 minutes; the suite holds a shorter form of each (the
# teacher under discrete SAC, IMPALA's silent wait). SAC to -400 is in `make test`, beside its other tests.
test-long: venv
	$(PY) -m pytest tests -m long -s

# The five-host suite alone, printing its numbers as they come.
multihost: venv
	$(PY) -m pytest tests -m multihost -s

# APPO with remote runners on the five hosts, to its stop reward (tests/test_multihost_async.py: a few
# minutes as root; only run when asked for, so neither `make test` nor `make multihost` runs it).
test-multihost-async: venv
	$(PY) -m pytest tests/test_multihost_async.py -m multihost_async -s

demo: venv
	$(PY) -m rlinks_rllib demo

bench: venv
	$(PY) benchmarks/bench_codec.py
	$(PY) benchmarks/bench_ingest.py
	$(PY) benchmarks/bench_client.py
	$(PY) benchmarks/bench_demo.py
	$(PY) benchmarks/bench_served.py
	$(PY) benchmarks/bench_websocket.py

# Long fuzzing of the frame decoder, message validation and episode checks
# (CI runs the same targets briefly as part of `make test`).
fuzz: venv
	RLINKS_FUZZ_EXAMPLES=$${RLINKS_FUZZ_EXAMPLES:-100000} $(PY) -m pytest -q tests/test_fuzz_targets.py --hypothesis-show-statistics

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis benchmarks/out .fuzz-corpus runs
