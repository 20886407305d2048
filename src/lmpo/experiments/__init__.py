"""Comparisons: experiment files (`spec`), the sweep behind `lmpo compare` (`sweep`),
statistics over seeds (`stats`) and `lmpo report` (`report`, `plots`)."""

from lmpo.experiments.spec import Experiment, check_differs, load_experiment

__all__ = ["Experiment", "check_differs", "load_experiment"]
