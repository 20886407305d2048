"""The design wing: what an experiment file says and what it asks of its runs.

Owns experiment files (`spec`: arms, seeds, conditions, claims, premises, frontier,
sequential design), the claims' schema and values (`claims`), the names that become
paths (`names`), the config keys experiments reason about (`keys`), the condition axis
(`conditions`), premises, comparators, matched-drift reads (`frontier`), dose-response
trends (`dose`) and seeds until decided (`sequential`). It may import the statistics wing
and lmpo's layers below `experiments`; never a run, an engine or a report.
"""
