# lmpo: `make test` and (once the trainer lands) `make demo` work on a fresh clone.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install test lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

# pytest exits 5 when it collected no test: that is a failure here, not a pass.
test: lint
	$(PY) -m pytest; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$rc

bench: $(STAMP)
	$(PY) benchmarks/logprobs_memory.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .ruff_cache
