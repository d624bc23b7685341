"""A registry extension for tests: one made-up subject, named by ``FE_CI_EXTRA_SUBJECTS``.

It stands in for a new frontend knob (no such entry point exists in any frontend release), so the
test can add a subject in the documented places only: a registry entry (here) and its module
(``toy_sum_bwd.py``), with ``toy_frontend.py`` as the build's entry point.
"""

from core.subjects import Subject

SUBJECTS = (
    Subject(
        name="toy_sum_bwd",
        entry_point="toy_frontend.sum_bwd",
        knob="deterministic",
        families=("sm_90",),
        outputs=("dx",),
        module="toy_sum_bwd",
        configs=(("n4096", {"n": 4096}), ("n65536", {"n": 65536})),
    ),
)
