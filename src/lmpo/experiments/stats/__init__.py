"""The statistics wing: numbers over seeds and the labels read from them.

Owns the per-seed reductions and each claim's test, interval and power (`seeds`), the
Holm step-down within a family (`multiplicity`) and the label a claim's numbers give
(`labels`). It knows nothing of experiment files, runs or reports: it may import only the
statistics wing itself and lmpo's layers below `experiments` (numpy and scipy do the
arithmetic).
"""
