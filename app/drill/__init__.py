"""Failure drills run on one machine: a local PostgreSQL primary and standby (``cluster``), groups of
Kairos processes labelled as regions, a fault injected on purpose, and a report of what it cost.
"""
