# make test: fresh .venv, install, run the whole suite.  make demo: a smoke sweep on a local Ray.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev,mol]"
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

demo: $(STAMP)
	$(PY) -m raylab.tune toy --smoke

bench: $(STAMP)
	$(PY) benchmarks/trial_overhead.py

clean:
	rm -rf $(VENV) results
