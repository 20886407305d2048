"""Experiment files at their public path: `lmpo.experiments.spec` is the module
`lmpo.experiments.design.spec` (the same object, so an attribute set on either is seen by
both), for the scripts and notebooks that import it from here."""

import sys

from lmpo.experiments.design import spec

sys.modules[__name__] = spec
