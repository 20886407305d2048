"""Adapters to the engines people run at scale. Each imports its engine lazily:
lmpo itself never needs verl or TRL installed."""
