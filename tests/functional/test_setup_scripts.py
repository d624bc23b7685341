"""What the README says ``scripts/quickstart`` does to the system. What ``scripts/install`` leaves
beside torch is checked where a newcomer first runs it: test_quickstart.py."""

from __future__ import annotations

import re

from testkit.service import ROOT


def test_readme_says_quickstart_installs_system_packages_and_how_to_skip_it() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("./scripts/quickstart", 1)[1][:1500]
    assert "apt" in block and "root" in block, block
    skip = re.search(r"(FE_CI_SETUP_SYSTEM)=0", block)
    assert skip, block
    # the variable the README names is the one the scripts honour
    setup = (ROOT / "scripts" / "setup").read_text()
    assert f'"${{{skip.group(1)}:-1}}" = 1' in setup
    assert "./scripts/setup" in (ROOT / "scripts" / "quickstart").read_text()
