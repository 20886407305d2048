"""`python -m lmpo.experiments.results [--check]`: the results pages' generator at its
public path (it lives in the report wing, `lmpo.experiments.report.results`)."""

from lmpo.experiments.report.results import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
