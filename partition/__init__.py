"""Partitioning layer: rules, candidates, cost, search and rewrite of the Relax module across backends."""
