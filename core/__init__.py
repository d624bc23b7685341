"""The domain the service and the runner share: the protocol and report models, the verdict and
gate rules, statuses, history and comparison rules, bisection rules and the subject declarations.

Imports neither side. ``subjects`` (and its ``ledger.json``) is standard library only: a candidate
stage imports it too, from the private copy of the source it is given.
"""
