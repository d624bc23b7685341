"""What a layer installed without its dependencies leaves to the host's torch environment
(``runner.envs.layers.left_to_host``), read from real ``.dist-info`` directories, and a layer's
key, which that choice changes only when it is made."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from runner.envs import layers


def _dist(site: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"]
    lines += [f"Requires-Dist: {r}\n" for r in requires]
    (info / "METADATA").write_text("".join(lines))


def test_each_requirement_outside_the_layer_is_named_with_what_the_host_has(
    tmp_path: Path,
) -> None:
    layer, host = tmp_path / "layer", tmp_path / "host"
    _dist(layer, "nvidia-cudnn-cu13", "9.28.1.4", ("nvidia-cublas", "nvidia-nvrtc>=13"))
    _dist(layer, "helper", "1.0", ("nvidia-cudnn-cu13", 'winreg ; sys_platform == "win32"'))
    _dist(host, "nvidia-cublas", "13.1.0.3")
    _dist(host, "nvidia-nvrtc", "12.9.86")
    assert layers.left_to_host(layer, [host]) == [
        "nvidia-cublas (host: 13.1.0.3)",
        "nvidia-cudnn-cu13 9.28.1.4 requires nvidia-nvrtc>=13, host: 12.9.86",
    ]
    assert layers.left_to_host(layer, []) == [
        "nvidia-cublas (not on this host)",
        "nvidia-nvrtc (not on this host)",
    ]


def test_the_key_changes_only_for_a_layer_that_leaves_its_dependencies_to_the_host() -> None:
    spec = layers.LayerSpec(
        requirements=("nvidia-cudnn-cu13==9.28.1.*",),
        torch="2.13.0",
        python="cpython-3.11",
        source="index=default;wheelhouse=",
        installer="uv",
    )
    # the key a layer built before the field existed had: the same fields, no host_deps
    before = {k: v for k, v in dataclasses.asdict(spec).items() if k != "host_deps"}
    old_key = hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:20]
    assert spec.key == old_key
    assert dataclasses.replace(spec, host_deps=True).key != old_key
