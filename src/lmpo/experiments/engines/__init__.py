"""The engines wing: an experiment's arms as another engine's jobs, and their logs as rows.

Owns verl launch commands and their refusals (`verl_launch`), verl jobs submitted to Ray
(`verl_jobs`), what `--engine trl` can run and how TRL's log maps to lmpo's metrics
(`trl_mapping`), and reading either engine's log as lmpo's rows (`engine_logs`). It may
import the design and statistics wings and lmpo's layers below `experiments`; never the
report or run wings.
"""
