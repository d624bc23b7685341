"""Whose compiled kernels may be shared by source: the service decides, never a runner or a build.

A build's source is trusted when it is a commit of the configured repository (``FE_CI_REPO_URL``)
whose wheel fe-ci's own builder made: an ``Artifact`` its build job uploaded, with the very
sha256 the build runs. Only such a build publishes compiled kernels under the key of their
sources (``runner/cache/compile_cache.py``); an uploaded wheel reads them but publishes only under
its own whole-candidate key, so no upload can poison another build's kernels.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.models import Artifact, Build


def trusted_source(session: Session, build: Build, repo_url: str) -> bool:
    if build.source != "commit" or build.repo != repo_url or not build.commit or not build.sha256:
        return False
    # an Artifact is written only by a build job's upload (service/api/jobs.py)
    built = session.scalar(
        select(Artifact.id)
        .where(Artifact.repo == repo_url, Artifact.commit == build.commit)
        .where(Artifact.sha256 == build.sha256)
        .limit(1)
    )
    return built is not None
