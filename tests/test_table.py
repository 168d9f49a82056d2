"""provision matrix: the overview, one release in full with its sources, and JSON."""

from __future__ import annotations

import json

from click.testing import CliRunner

from provision.cli.commands import cli
from provision.matrix import load


def run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, ["matrix", *args])
    return res.exit_code, res.stdout, res.stderr


def test_overview_has_a_line_per_release_with_its_facts() -> None:
    code, out, _ = run()
    assert code == 0
    m = load()
    rows = {line.split()[0]: line for line in out.splitlines()[2:] if line[:1].isdigit()}
    assert list(rows) == [r.tf for r in m.releases]
    for rel in m.releases:
        cuda, cudnn = m.cuda_of(rel), m.cudnn_of(rel)
        assert cuda.full in rows[rel.tf] and cudnn.full in rows[rel.tf]
        assert cuda.driver_min in rows[rel.tf]


def test_one_release_shows_every_field_and_its_sources() -> None:
    code, out, _ = run("--tf", "2.11")
    assert code == 0
    rel = load().release("2.11")
    assert "CUDA 11.2" in out and "cuDNN 8.1" in out
    for sid in rel.sources:
        assert load().sources[sid].url in out
    # The widely copied wrong table is recorded, and which source the matrix follows.
    assert any("11.8" in d for d in rel.disagreements)
    for d in rel.disagreements:
        assert f"    - {d}" in out
    assert "pip      the pip path cannot serve TensorFlow 2.11" in out


def test_json_is_the_whole_matrix_or_one_release() -> None:
    code, out, _ = run("--json")
    assert code == 0
    data = json.loads(out)
    assert [r["tf"] for r in data["releases"]] == [r.tf for r in load().releases]
    code, out, _ = run("--tf", "2.13.1", "--json")
    one = json.loads(out)["release"]
    assert one["tf"] == "2.13" and one["cuda_row"]["version"] == "11.8"
    assert one["paths"] == {"conda": "ok", "system": "ok", "pip": "ok"}
    assert {s["id"] for s in one["source_rows"]} >= set(load().release("2.13").sources)


def test_unknown_release_names_the_closest_in_one_line() -> None:
    code, out, err = run("--tf", "2.99")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "closest known: 2.9" in err
