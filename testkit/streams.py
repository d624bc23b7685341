"""What a stream of builds (bench/gpu_stream.py) shows, read from its reports alone.

``summary_text(doc)`` takes ``{"builds": [reports in build order], "planted": {"<id>": what},
"wall_s": {"<id>": s}}`` and answers, each with the builds that break it: was a comparison lost
after a subject's first build; one pinned config per subject and family; every planted build
flagged; no genuine build flagged (a genuine build right after a flipped-bit one rightly says its
bits changed back); one verdict for the genuine builds; the warm determinism stage's median (goal
20 s) and the cold ones (goal 45 s); where a warm build's seconds went; and a line per build
with the host's state when it finished (``host_sample``, taken by the stream after each build).
"""

from __future__ import annotations

import os
import re
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from testkit import flag_plant, knob_plant
from testkit.plants import PLANTS

# the plants a subject of their own must catch: kind -> (what it plants, the subject)
CAUGHT_BY = {
    "dropped_flag": (flag_plant.DROPPED_FLAG, flag_plant.SUBJECT),
    "dropped_provider_flag": (flag_plant.DROPPED_PROVIDER_FLAG, flag_plant.PROVIDER_SUBJECT),
    "dropped_knob": (knob_plant.DROPPED_KNOB, knob_plant.SUBJECT),
}
KIND_OF = {what: kind for kind, what in PLANTS.items()} | {
    what: kind for kind, (what, _) in CAUGHT_BY.items()
}
PLANTED_SUBJECT = "flex_attention_bwd"
WARM_GOAL_S = 20.0
COLD_GOAL_S = 45.0
COLD = re.compile(r"compile cache \S+: 0 entries present")


def _kind_of(what: str) -> str:
    """The plant a description names; earlier streams' wording of a plant is still recognised."""
    if what in KIND_OF:
        return KIND_OF[what]
    if "bit flipped" in what:
        return "flipped_bit"
    return "slower_backward" if "backward runs" in what else "planted"


def _kinds(doc: dict[str, Any]) -> dict[int, str]:
    planted = {int(k): _kind_of(v) for k, v in doc.get("planted", {}).items()}
    return {b["id"]: planted.get(b["id"], "genuine") for b in doc["builds"]}


def _gpu_stage(build: dict[str, Any], name: str) -> dict[str, Any] | None:
    for job in build.get("jobs", []):
        if job.get("kind") == "gpu":
            for stage in job.get("stages", []):
                if stage["name"] == name:
                    return dict(stage)
    return None


def _failed(build: dict[str, Any], subject: str) -> bool:
    """Whether the build is red and its GPU determinism stage failed a check of ``subject``."""
    det = _gpu_stage(build, "determinism") or {}
    checks = det.get("checks", [])
    hit = any(subject in c["name"] and c["status"] == "fail" for c in checks)
    return bool(build.get("verdict") == "fail" and hit)


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def analyse(doc: dict[str, Any]) -> dict[str, Any]:
    builds, kinds = doc["builds"], _kinds(doc)
    seen: set[tuple[str, str]] = set()
    configs: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
    series: defaultdict[tuple[str, str], set[Any]] = defaultdict(set)
    lost: list[str] = []
    flagged_genuine: list[str] = []
    changed_back: list[str] = []
    planted_missed: list[str] = []
    for build in builds:
        rows = {(r["family"], r["subject"]): r for r in build.get("history", [])}
        for pair in sorted(seen - set(rows)):
            if not _failed(build, pair[1]):  # a failed subject's bits are compared with none
                lost.append(f"#{build['id']} {pair[0]} {pair[1]}: no comparison")
        for pair, row in rows.items():
            configs[pair].add(row["config"])
            series[pair].add(row.get("series"))
            if pair in seen and row["bits"] == "first" and not row.get("series_start"):
                lost.append(f"#{build['id']} {pair[0]} {pair[1]}: 'first' again")
            seen.add(pair)
        kind = kinds[build["id"]]
        planted_rows = [r for p, r in rows.items() if p[1] == PLANTED_SUBJECT]
        if kind == "flipped_bit" and not any(r["bits"] == "changed" for r in planted_rows):
            planted_missed.append(f"#{build['id']} flipped_bit: bits not changed")
        if kind == "slower_backward" and not any(r["cost_regressed"] for r in planted_rows):
            ratios = [r.get("cost_ratio") for r in planted_rows]
            planted_missed.append(f"#{build['id']} slower_backward: not flagged (ratio {ratios})")
        if kind in CAUGHT_BY and not _failed(build, subject := CAUGHT_BY[kind][1]):
            planted_missed.append(f"#{build['id']} {kind}: {subject} did not fail")
        if kind != "genuine":
            continue
        for pair, row in rows.items():
            if row["cost_regressed"]:
                flagged_genuine.append(f"#{build['id']} {pair[1]}: cost {row['cost_ratio']:.2f}x")
            if row["bits"] == "changed":
                previous = kinds.get(row.get("previous_build_id") or -1, "genuine")
                where = f"#{build['id']} {pair[1]} after #{row.get('previous_build_id')}"
                (changed_back if previous == "flipped_bit" else flagged_genuine).append(where)
    return {
        "kinds": kinds,
        "lost": lost,
        "configs": {f"{f} {s}": sorted(c) for (f, s), c in configs.items()},
        "series": {f"{f} {s}": sorted(map(str, n)) for (f, s), n in series.items()},
        "planted_missed": planted_missed,
        "flagged_genuine": flagged_genuine,
        "changed_back": changed_back,
        "verdicts": _verdicts(builds, kinds),
        "costs": _costs(builds, kinds),
        "times": _times(doc, builds),
    }


def _verdicts(builds: list[dict[str, Any]], kinds: dict[int, str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for build in builds:
        if kinds[build["id"]] != "genuine":
            continue
        det = _gpu_stage(build, "determinism") or {}
        checks = ", ".join(f"{c['name']} {c['status']}" for c in det.get("checks", []))
        out[f"{build['verdict']}: {checks}"].append(build["id"])
    return dict(out)


def _costs(builds: list[dict[str, Any]], kinds: dict[int, str]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for build in builds:
        for row in build.get("history", []):
            if row.get("cost_ratio") is not None:
                out[f"{kinds[build['id']]} {row['subject']}"].append(round(row["cost_ratio"], 3))
    return dict(out)


def cold(build: dict[str, Any]) -> bool:
    """Whether the build's determinism stage found its compile cache empty (its reason says
    ``compile cache KEY: 0 entries present``): a new wheel's first build compiles everything."""
    det = _gpu_stage(build, "determinism") or {}
    return bool(COLD.search(det.get("reason") or ""))


def _times(doc: dict[str, Any], builds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the warm builds (after the first, with a compile cache that had entries): the
    build, each stage, the phases; and each cold build's determinism stage."""
    warm = [b for b in builds[1:] if not cold(b)]
    colds = [b for i, b in enumerate(builds) if i == 0 or cold(b)]
    stages: dict[str, list[float]] = defaultdict(list)
    phases: dict[str, list[float]] = defaultdict(list)
    for build in warm:
        for job in build.get("jobs", []):
            for stage in job.get("stages", []):
                stages[f"{job['kind']} {stage['name']}"].append(stage.get("duration_s") or 0.0)
        det = _gpu_stage(build, "determinism") or {}
        for part, values in (det.get("timings") or {}).items():
            for key, value in values.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    phases[f"{part}.{key}"].append(float(value))
    walls = [float(doc.get("wall_s", {}).get(str(b["id"]), 0.0)) for b in warm]
    return {
        "warm_builds": len(warm),
        "wall_s": _median([w for w in walls if w]),
        "cold_determinism_s": {
            b["id"]: round((_gpu_stage(b, "determinism") or {}).get("duration_s") or 0.0, 1)
            for b in colds
        },
        "stages": {k: _median(v) for k, v in sorted(stages.items())},
        "phases": {k: _median(v) for k, v in sorted(phases.items())},
    }


def _mark(ok: bool) -> str:
    return "yes" if ok else "NO"


def summary_text(doc: dict[str, Any], pins: list[dict[str, Any]] | None = None) -> str:
    a = analyse(doc)
    kinds = Counter(a["kinds"].values())
    det_warm = a["times"]["stages"].get("gpu determinism")
    one_config = all(len(c) == 1 for c in a["configs"].values())
    lines = [
        f"{len(doc['builds'])} builds: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())),
        f"no comparison lost after a subject's first build: {_mark(not a['lost'])}"
        + (f" ({'; '.join(a['lost'])})" if a["lost"] else ""),
        f"one pinned config per subject: {_mark(one_config)} "
        + "; ".join(
            f"{k}: {', '.join(v)} (series {', '.join(a['series'][k])})"
            for k, v in sorted(a["configs"].items())
        ),
        f"every planted build flagged: {_mark(not a['planted_missed'])}"
        + (f" ({'; '.join(a['planted_missed'])})" if a["planted_missed"] else ""),
        f"no genuine build flagged: {_mark(not a['flagged_genuine'])}"
        + (f" ({'; '.join(a['flagged_genuine'])})" if a["flagged_genuine"] else "")
        + (
            f"; bits changed back after a flipped bit: {', '.join(a['changed_back'])}"
            if a["changed_back"]
            else ""
        ),
        f"one verdict for the genuine builds: {_mark(len(a['verdicts']) == 1)} "
        + "; ".join(f"{v} (builds {', '.join(map(str, ids))})" for v, ids in a["verdicts"].items()),
        f"warm determinism stage median: {det_warm} s over {a['times']['warm_builds']} builds "
        f"(goal <= {WARM_GOAL_S:g} s: {_mark(det_warm is not None and det_warm <= WARM_GOAL_S)}); "
        "cold (builds "
        + ", ".join(f"#{k} {v} s" for k, v in a["times"]["cold_determinism_s"].items())
        + f"; goal <= {COLD_GOAL_S:g} s: "
        + _mark(all(v <= COLD_GOAL_S for v in a["times"]["cold_determinism_s"].values()))
        + f"); warm build wall (submission to "
        f"report) median {a['times']['wall_s']} s",
        "cost of determinism at the comparison point: "
        + "; ".join(f"{k} {min(v):.2f}-{max(v):.2f}x (n={len(v)})" for k, v in a["costs"].items()),
        "warm medians, stages: " + ", ".join(f"{k} {v} s" for k, v in a["times"]["stages"].items()),
        "warm medians, determinism stage phases: "
        + ", ".join(f"{k} {v}" for k, v in a["times"]["phases"].items()),
    ]
    lines.append("per build (determinism stage s, its ready s; host when it finished):")
    for build in doc["builds"]:
        det = _gpu_stage(build, "determinism") or {}
        ready = ((det.get("timings") or {}).get("stage") or {}).get("ready_s")
        host = doc.get("host", {}).get(str(build["id"]), {})
        line = f"  #{build['id']} {a['kinds'][build['id']]}: {det.get('duration_s', 0.0):.1f} s"
        line += f", ready {ready}"
        if host:
            line += (
                f"; load {host['loadavg']:.1f}, {host['processes']} processes, "
                f"{host['mem_available_mib']} MiB free, "
                f"most CPU: {', '.join(host['top_cpu_s'][:3])}"
            )
        lines.append(line)
    if pins is not None:
        lines.append(
            "pins: "
            + "; ".join(
                f"{p['family']} {p['subject']} series {p['series']} {p['config']} ({p['source']})"
                for p in pins
            )
        )
    return "\n".join(lines)


def host_sample() -> dict[str, Any]:
    """What the host looked like when a build finished: load, processes, memory, and the five
    processes that have used the most CPU so far. A stream whose stages slow down build after
    build (the first H200 stream's did, by about 1.5x over 19 builds) shows here why."""
    procs: list[tuple[float, str]] = []
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        procs.append(((int(fields[11]) + int(fields[12])) / tick, f"{entry.name}:{name}"))
    meminfo = dict(
        (line.split(":")[0], int(line.split()[1]))
        for line in Path("/proc/meminfo").read_text().splitlines()
    )
    return {
        "loadavg": os.getloadavg()[0],
        "processes": len(procs),
        "mem_available_mib": meminfo.get("MemAvailable", 0) // 1024,
        "top_cpu_s": [f"{name} {cpu:.0f}" for cpu, name in sorted(procs, reverse=True)[:5]],
    }
