# lmpo: `make demo` and `make test` work on a fresh clone.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export PIP_DISABLE_PIP_VERSION_CHECK := 1

SFT_POLICY := runs/sft/chain_sum_nano

.PHONY: install demo test lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Warm-start the tiny policy (reused if present), then a short CE-GPPO run that ends
# with a before/after per-tier accuracy table. Each demo run gets its own directory.
demo: $(STAMP)
	test -f $(SFT_POLICY)/config.json || $(VENV)/bin/lmpo sft --config configs/sft_chain_sum.yaml
	$(VENV)/bin/lmpo train --config configs/demo.yaml --run-dir runs/demo-$$(date +%Y%m%d-%H%M%S)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

# pytest exits 5 when it collected no test: that is a failure here, not a pass.
test: lint
	$(PY) -m pytest; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$rc

bench: $(STAMP)
	$(PY) benchmarks/logprobs_memory.py
	$(PY) benchmarks/rollout_speed.py
	$(PY) benchmarks/step_overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .ruff_cache
