"""The real parts that the tests and the benchmarks both start: a service on 127.0.0.1, real and
constructed wheels, registry environments, a seeded store.

Neither ``tests/`` nor ``bench/`` owns these: each imports them from here, and neither imports
the other. The product (``service/``, ``runner/``) never imports this package and it is not
installed with it.
"""
