"""Builds in every state, written straight into a service's database with the service's models.

Used by the dashboard's browser tests and by ``bench/dashboard_bench.py``, which import from here:
``seed_all`` (one build per state, after a history for the trends), ``seed_many`` (thousands, for
the benchmarks) and the markup the hostile build carries (``XSS_VERSION``, ``XSS_BRANCH``).
Rows go in with Core ``INSERT``s and explicit ids, so ten thousand builds take seconds.

- ``rows``: the seeder and the context a scenario writes rows with;
- ``jobs``: a finished CPU job and a finished GPU job, with their stages and checks;
- ``scenarios``: one build per state;
- ``seed``: the runners, ``seed_all`` and ``seed_many``.
"""

from testkit.dashboard_data.scenarios import XSS_BRANCH, XSS_VERSION
from testkit.dashboard_data.seed import seed_all, seed_many

__all__ = ["XSS_BRANCH", "XSS_VERSION", "seed_all", "seed_many"]
