"""Rollout controllers: what may end a response during decoding (ESPO, its variant F, ...).

`controller: {name, hparams}` in a train config names one (`none` by default). Every
module in this package is imported here, so a new controller is one file with its
`@CONTROLLERS.register(...)` line (docs/your-method.md).
"""

import importlib
import pkgutil

from lmpo.rollout.controllers.base import (
    RolloutContext,
    RolloutController,
    StopAccounting,
    finish_stopped,
)
from lmpo.rollout.controllers.registry import (
    CONTROLLERS,
    build_controller,
    controller_hparams,
    list_controllers,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

from lmpo.rollout.controllers.espo import ESPO  # noqa: E402
from lmpo.rollout.controllers.random_stop import RandomStop  # noqa: E402

__all__ = ["CONTROLLERS", "ESPO", "RandomStop", "RolloutContext", "RolloutController",
           "StopAccounting", "build_controller", "controller_hparams", "finish_stopped",
           "list_controllers"]
