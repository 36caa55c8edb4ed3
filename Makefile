# Two entry points for a fresh clone (see README.md): `make demo` and `make test`.
# Both create .venv from the pinned requirements.txt on first use.
VENV := .venv
PYTHON := $(VENV)/bin/python
DATA_DIR ?= ../shared/data/multi30k
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: install demo test lint

install: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements.txt
	$(VENV)/bin/pip install --quiet --no-deps --editable .
	touch $@

demo: install
	$(PYTHON) -m keras_transformer params

test: install
	$(PYTHON) -m pytest -q

lint: install
	$(VENV)/bin/ruff check keras_transformer pipelines tests benchmarks
	$(VENV)/bin/ruff format --check keras_transformer pipelines tests benchmarks
