"""The report wing: a sweep's rows judged and written as report.md, report.json and plots.

Owns the audits before any verdict (`audit`), engagement (`engagement`), the claim cards
(`claim_table`), units (`units`), plots (`plots`, `diagnostics`), re-judging a committed
report (`rejudge`), the report itself (`write`: `lmpo report`) and the results pages made
from committed reports (`results`). It may import the engines, design and statistics
wings and lmpo's layers below `experiments`; never the run wing.
"""
