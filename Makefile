# Each target builds .venv itself from the pins in pyproject.toml.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[onnx,torch,bench,dev,tune,opencl,cuda,jax,ray]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m tensorforge.cli demo

test: $(STAMP)
	$(PY) -m pytest -n 2 tests

clean:
	rm -rf $(VENV) build *.egg-info
