"""The domain the service and the runner share: the protocol and report models, the verdict and
gate rules, statuses, history and comparison rules, bisection rules and the subject declarations.

Imports neither side, with one exception by name: ``Subject.load()`` imports a subject's harness
module (``runner/inside/subjects/``) with ``importlib``, and only a candidate's stage calls it,
inside the candidate's environment. ``subjects`` (and its ``ledger.json``), ``surface``, ``kinds``,
``comparable`` and ``harness`` are standard library only: a candidate stage imports them too, from
the private copy of the source it is given.
"""
