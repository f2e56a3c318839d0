# The README's two commands: `make test` and `make demo`. Both create .venv on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo lint bench clean java-check hosts-check prometheus-check

# The run-time dependencies exactly as raygroups/constraints.txt pins them: what cluster.yaml installs.
$(STAMP): pyproject.toml raygroups/constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "raygroups needs Python >= 3.11, found " + sys.version.split()[0])'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -qq --upgrade pip
	$(PY) -m pip install -qq -c raygroups/constraints.txt -e '.[dev]'
	@touch $(STAMP)

java-check:
	@sh scripts/check_java.sh

hosts-check:
	@sh scripts/check_hosts_tools.sh

prometheus-check:
	@sh scripts/check_prometheus.sh

test: $(STAMP) java-check hosts-check prometheus-check
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q tests/unit/test_layers.py tests/unit/test_packaging.py

demo: $(STAMP)
	$(PY) -m raygroups.demo

bench: $(STAMP)
	$(PY) bench/log_bench.py
	$(PY) bench/throughput.py
	$(PY) bench/failover.py
	$(PY) bench/restart.py
	$(PY) bench/compaction.py
	$(PY) bench/coalescing.py
	$(PY) bench/detection.py
	$(PY) bench/scale.py
	$(PY) bench/gateway.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
