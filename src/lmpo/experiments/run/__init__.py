"""The run wing: `lmpo compare`, every arm x seed of an experiment as an `lmpo train` run.

Owns the sweep (`sweep`: resuming, looks of the sequential design, the report at the
end), the checks before the first run (`upfront`) and the launchers that start runs
(`launcher`: a local pool forked from a warm process; `ray_launcher`: Ray tasks). The top
wing: it may import every other wing and lmpo's layers below `experiments`.
"""
