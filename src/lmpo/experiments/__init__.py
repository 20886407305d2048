"""Comparisons: experiment files, sweeps of runs, statistics over seeds and reports, in
five wings, lowest first (each imports only the wings before it; tests/test_architecture.py
checks):

- `stats`: numbers over seeds, multiplicity, labels;
- `design`: experiment files, claims, premises, conditions, sequential design;
- `engines`: verl and TRL jobs and their logs;
- `report`: audits, engagement, claim cards, plots, `lmpo report`, the results pages;
- `run`: `lmpo compare`, its up-front checks and launchers.

`lmpo.experiments.spec` and `python -m lmpo.experiments.results` keep their public paths.
The names below are loaded on first use, so that importing a light module of a wing (the
launchers `lmpo compare --help` lists) does not import the trainer.
"""

__all__ = ["Experiment", "check_differs", "load_experiment"]


def __getattr__(name: str):
    if name in __all__:
        from lmpo.experiments.design import spec

        return getattr(spec, name)
    raise AttributeError(f"module 'lmpo.experiments' has no attribute {name!r}")
