"""The summary of a stream of builds (``testkit/streams.py``, of what ``bench/gpu_stream.py``
writes), read from the first H200 stream as it was recorded
(``docs/measurements/h200-stream-2026-12-04.json``): what it says is what the closing figures of
that stream were taken from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.flag_plant import DROPPED_FLAG
from testkit.knob_plant import DROPPED_KNOB
from testkit.streams import analyse, host_sample, summary_text

MEASUREMENTS = Path(__file__).resolve().parents[2] / "docs/measurements"
RECORDED = MEASUREMENTS / "h200-stream-2026-12-04.json"
# the dropped indexer knob (build 2) among nine genuine builds, a CPU runner beside the GPU one
KNOB_STREAM = MEASUREMENTS / "h200-stream-2026-12-05b.json"


@pytest.fixture(scope="module")
def stream() -> dict:
    return json.loads(RECORDED.read_text())


def test_the_recorded_stream_reads_as_it_was_measured(stream: dict) -> None:
    a = analyse(stream)
    kinds = list(a["kinds"].values())
    assert kinds.count("flipped_bit") == 2 and kinds.count("slower_backward") == 2
    assert a["lost"] == []
    assert all(len(configs) == 1 for configs in a["configs"].values())
    # the two slower builds of that stream (backward run four times) stayed inside the band
    assert len(a["planted_missed"]) == 2
    assert all("slower_backward" in line for line in a["planted_missed"])
    assert a["flagged_genuine"] == []
    assert len(a["verdicts"]) == 1


def test_the_summary_names_each_build_and_the_warm_median(stream: dict) -> None:
    text = summary_text(stream)
    # the planted wheels' first builds compiled everything too: cold, not in the warm median
    assert "warm determinism stage median: 15.23 s over 16 builds (goal <= 20 s: yes)" in text
    assert "cold (builds #1 32.6 s, #5 33.3 s, #9 36.3 s; goal <= 45 s: yes)" in text
    per_build = [line for line in text.splitlines() if line.startswith("  #")]
    assert len(per_build) == len(stream["builds"])
    assert per_build[0].startswith("  #1 genuine: 32.6 s, ready 3.148")


def test_host_samples_are_shown_where_the_stream_has_them(stream: dict) -> None:
    first = stream["builds"][0]["id"]
    host = {"loadavg": 3.5, "processes": 412, "mem_available_mib": 1000, "top_cpu_s": ["7:x 9"]}
    text = summary_text({**stream, "host": {str(first): host}})
    assert f"  #{first} genuine: 32.6 s, ready 3.148; load 3.5, 412 processes" in text


def test_a_host_sample_is_read_from_this_host() -> None:
    sample = host_sample()
    assert sample["processes"] >= 1 and sample["mem_available_mib"] > 0
    assert len(sample["top_cpu_s"]) <= 5 and all(":" in row for row in sample["top_cpu_s"])


def _as_planted(build: dict, verdict: str, subject: str, status: str) -> dict:
    """A recorded build relabelled as a plant, its GPU determinism stage given a check of
    ``subject`` of ``status``."""
    out = json.loads(json.dumps(build))
    out["verdict"] = verdict
    for job in out["jobs"]:
        if job["kind"] == "gpu":
            for stage in job["stages"]:
                if stage["name"] == "determinism":
                    stage["checks"].append({"name": f"{subject}.deterministic", "status": status})
    return out


@pytest.mark.parametrize(
    ("kind", "what", "subject"),
    [
        ("dropped_flag", DROPPED_FLAG, "sdpa_torch_bwd"),
        ("dropped_knob", DROPPED_KNOB, "indexer_top_k"),
    ],
)
@pytest.mark.parametrize(
    ("verdict", "status", "missed"), [("fail", "fail", False), ("pass", "pass", True)]
)
def test_a_plant_of_one_subject_counts_as_caught_only_when_that_subject_fails(
    stream: dict, kind: str, what: str, subject: str, verdict: str, status: str, missed: bool
) -> None:
    """The #837 plant must fail ``sdpa_torch_bwd``, the dropped indexer knob ``indexer_top_k``;
    a red build whose other subject failed catches neither."""
    build = _as_planted(stream["builds"][1], verdict, subject, status)
    doc = {"builds": [stream["builds"][0], build], "planted": {str(build["id"]): what}}
    a = analyse({**doc, "wall_s": {}})
    assert a["kinds"][build["id"]] == kind
    assert bool(a["planted_missed"]) is missed
    if missed:
        assert a["planted_missed"] == [f"#{build['id']} {kind}: {subject} did not fail"]
    other = "indexer_top_k" if subject == "sdpa_torch_bwd" else "sdpa_torch_bwd"
    elsewhere = _as_planted(stream["builds"][1], "fail", other, "fail")
    doc = {"builds": [stream["builds"][0], elsewhere], "planted": {str(build["id"]): what}}
    assert analyse({**doc, "wall_s": {}})["planted_missed"] == [
        f"#{build['id']} {kind}: {subject} did not fail"
    ]


def test_a_failed_subject_has_no_comparison_and_none_is_lost() -> None:
    """A deterministic arm that varied has no bits to compare (``core.history.comparable``):
    the build that dropped the indexer's knob has no history row of ``indexer_top_k``, and that
    is the failure the plant must cause, not a lost comparison. A genuine build that lacks the
    row has lost it."""
    doc = json.loads(KNOB_STREAM.read_text())
    a = analyse(doc)
    assert a["kinds"][2] == "dropped_knob" and a["planted_missed"] == []
    assert "indexer_top_k" not in {r["subject"] for r in doc["builds"][1]["history"]}
    assert a["lost"] == []
    text = summary_text(doc)
    assert "warm determinism stage median: 30.14 s over 8 builds (goal <= 20 s: NO)" in text
    assert "cold (builds #1 49.6 s, #2 44.0 s; goal <= 45 s: NO)" in text
    genuine = json.loads(json.dumps(doc["builds"][2]))
    genuine["history"] = [r for r in genuine["history"] if r["subject"] != "indexer_top_k"]
    lost = analyse({**doc, "builds": [doc["builds"][0], genuine]})["lost"]
    assert lost == [f"#{genuine['id']} sm_90 indexer_top_k: no comparison"]
