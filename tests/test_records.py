"""provision.records: frozen dataclasses from parsed TOML/JSON, and the refusals that name the place
and the field."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from provision import __version__, records
from provision.doctor.diagnosis import Diagnosis
from provision.environment import Request
from provision.errors import MatrixError, ProvisionError
from provision.registry import LastVerify, Record

DROP = object()  # a key left out


def _no_x(value: str) -> str | None:
    return "has an x" if "x" in value else None


@dataclass(frozen=True)
class Part:
    id: str
    size: int = 0


@dataclass(frozen=True)
class Inner:
    colour: Literal["red", "green"]
    depth: float = 1.0


@dataclass(frozen=True)
class Thing:
    name: str = field(metadata=records.checked(_no_x))
    count: int
    ratio: float
    on: bool
    note: str | None
    tags: tuple[str, ...]
    parts: tuple[Part, ...]
    inner: Inner
    named_parts: tuple[Part, ...] = field(default=(), metadata=records.named("part {id}"))
    extra: Inner | None = None
    wheels: dict[str, str] = field(default_factory=dict)
    level: Literal[1, 2] = 1
    label: str = "xx"  # a default is never checked


@dataclass(frozen=True)
class Odd:
    when: set[str]


def _good() -> dict[str, object]:
    return {
        "name": "thing",
        "count": 3,
        "ratio": 0.5,
        "on": True,
        "note": None,
        "tags": ["a", "b"],
        "parts": [{"id": "p", "size": 2}, {"id": "q"}],
        "inner": {"colour": "red"},
    }


def _refused(data: dict[str, object], error: type[Exception] = ProvisionError) -> str:
    with pytest.raises(error) as caught:
        records.read(Thing, data, "thing 1", error)
    return str(caught.value)


def test_a_good_row_is_built_with_the_defaults() -> None:
    thing = records.read(Thing, _good(), "thing 1", ValueError)
    assert thing == Thing(
        name="thing",
        count=3,
        ratio=0.5,
        on=True,
        note=None,
        tags=("a", "b"),
        parts=(Part("p", 2), Part("q", 0)),
        inner=Inner("red"),
    )
    assert thing.label == "xx" and thing.wheels == {} and thing.extra is None


def test_the_asdict_form_reads_back_through_json() -> None:
    data = {**_good(), "extra": {"colour": "green", "depth": 2.5}, "wheels": {"w": "1"}}
    thing = records.read(Thing, data, "thing 1", ValueError)
    assert (
        records.read(Thing, json.loads(json.dumps(asdict(thing))), "thing 1", ValueError) == thing
    )


def test_an_int_is_a_float_and_a_bool_is_no_number() -> None:
    assert records.read(Thing, {**_good(), "ratio": 2}, "t", ValueError).ratio == 2
    assert _refused({**_good(), "count": True}) == "thing 1: field 'count' must be int, got True"
    assert _refused({**_good(), "ratio": False}) == (
        "thing 1: field 'ratio' must be float, got False"
    )
    assert _refused({**_good(), "on": 1}) == "thing 1: field 'on' must be bool, got 1"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"count": DROP}, "thing 1: missing field 'count'"),
        ({"name": 3}, "thing 1: field 'name' must be str, got 3"),
        ({"count": "3"}, "thing 1: field 'count' must be int, got '3'"),
        ({"note": 3}, "thing 1: field 'note' must be str or None, got 3"),
        ({"tags": "a"}, "thing 1: field 'tags' must be list, got 'a'"),
        ({"tags": ["a", 1]}, "thing 1: field 'tags' must be a list of strings, got ['a', 1]"),
        ({"wheels": ["w"]}, "thing 1: field 'wheels' must be dict, got ['w']"),
        ({"wheels": {"w": 1}}, "thing 1: field 'wheels' must be a dict of strings, got {'w': 1}"),
        ({"name": "xyz"}, "thing 1: field 'name': 'xyz' has an x"),
        ({"colour": "red", "size": 1}, "thing 1: unknown field(s) colour, size"),
    ],
    ids=["missing", "str", "int", "optional", "list", "list items", "dict", "dict values",
         "check", "unknown"],
)  # fmt: skip
def test_a_bad_field_is_named(change: dict[str, object], message: str) -> None:
    data = {k: v for k, v in {**_good(), **change}.items() if v is not DROP}
    assert _refused(data) == message


def test_the_callers_error_class_is_raised() -> None:
    assert _refused({**_good(), "count": "3"}, MatrixError).startswith("thing 1: field 'count'")
    assert _refused({**_good(), "count": "3"}, ValueError).startswith("thing 1: field 'count'")


def test_data_that_is_no_table_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^request: must be dict, got None$"):
        records.read(Request, None, "request", ValueError)


def test_a_nested_row_is_named_after_its_field() -> None:
    assert _refused({**_good(), "inner": {}}) == "thing 1.inner: missing field 'colour'"
    assert _refused({**_good(), "inner": "red"}) == "thing 1: field 'inner' must be dict, got 'red'"
    assert _refused({**_good(), "inner": {"colour": "red", "hue": 1}}) == (
        "thing 1.inner: unknown field(s) hue"
    )
    assert _refused({**_good(), "extra": {"colour": "red", "depth": "deep"}}) == (
        "thing 1.extra: field 'depth' must be float, got 'deep'"
    )
    assert _refused({**_good(), "extra": 3}) == (
        "thing 1: field 'extra' must be dict or None, got 3"
    )


def test_rows_of_a_tuple_of_dataclasses_are_named_by_index_or_template() -> None:
    parts = [{"id": "p"}, {"id": "q", "size": "big"}]
    assert _refused({**_good(), "parts": parts}) == (
        "thing 1.parts[1]: field 'size' must be int, got 'big'"
    )
    assert _refused({**_good(), "named_parts": parts}) == (
        "part q: field 'size' must be int, got 'big'"
    )
    assert _refused({**_good(), "named_parts": [{"size": 1}]}) == "part ?: missing field 'id'"
    assert _refused({**_good(), "parts": [{"id": "p"}, "q"]}) == (
        "thing 1: field 'parts' must be a list of dicts, got [{'id': 'p'}, 'q']"
    )


def test_literal_words_must_match_in_value_and_type() -> None:
    assert _refused({**_good(), "inner": {"colour": "blue"}}) == (
        "thing 1.inner: field 'colour' must be one of 'red', 'green', got 'blue'"
    )
    assert records.read(Thing, {**_good(), "level": 2}, "t", ValueError).level == 2
    assert _refused({**_good(), "level": True}) == (
        "thing 1: field 'level' must be one of 1, 2, got True"
    )
    assert _refused({**_good(), "level": "1"}) == (
        "thing 1: field 'level' must be one of 1, 2, got '1'"
    )


def test_a_value_that_already_is_the_dataclass_is_taken() -> None:
    inner = Inner("green", 3.0)
    assert records.read(Thing, {**_good(), "inner": inner}, "t", ValueError).inner is inner


def test_a_type_the_reader_does_not_know_is_a_bug_in_the_dataclass() -> None:
    with pytest.raises(TypeError, match="Odd: records cannot read a field of type"):
        records.read(Odd, {"when": []}, "odd", ValueError)


def test_long_values_are_cut_in_messages() -> None:
    message = _refused({**_good(), "tags": ["a"] * 100 + [1]})
    head, shown = message.split(", got ")
    assert head == "thing 1: field 'tags' must be a list of strings"
    assert shown.startswith("['a', 'a'") and shown.endswith("...") and len(shown) == 80


# The readers built on it: the registry's records and the manifest's request.


def _record(**change: object) -> dict[str, object]:
    rec = Record(
        "e", "/envs/e", "pip", "2.13.1", "3.11", "/p", "/p/bin/python", "uv", "0" * 64, 1.5
    )
    return {**rec.to_json(), **change}


def test_a_registry_record_reads_back() -> None:
    last = LastVerify(ok=True, gpus=1, summary="PASS", at=2.0)
    rec = Record.from_json(json.loads(json.dumps(_record(last_verify=asdict(last)))))
    assert rec.last_verify == last and rec.owned is True


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tf": 2.13}, "record: field 'tf' must be str, got 2.13"),
        ({"colour": "red"}, "record: unknown field(s) colour"),
        ({"last_verify": {"ok": True}}, "record.last_verify: missing field 'gpus'"),
        ({"schema": 2}, "not a provision registry record"),
    ],
)
def test_a_bad_registry_record_is_refused(change: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        Record.from_json(_record(**change))
    assert str(caught.value) == message


def test_a_request_names_its_bad_field() -> None:
    good = {"tf": "2.13", "path": "pip", "python": "3.11", "gpus": "0"}
    assert Request.from_json(good) == Request("2.13", "pip", "3.11", gpus="0")
    with pytest.raises(ValueError, match=r"^request: field 'path' must be one of 'conda', "):
        Request.from_json({**good, "path": "docker"})
    with pytest.raises(ValueError, match=r"^request: field 'jupyter' must be bool, got 'yes'$"):
        Request.from_json({**good, "jupyter": "yes"})


# The doctor's report and the host report inside it, read back from a committed H200 capture.

CAPTURE = Path(__file__).parent / "golden" / "doctor" / "capture-h200.json"


def _capture() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(CAPTURE.read_text())
    return data


def test_a_capture_reads_back_to_the_same_json() -> None:
    data = _capture()
    again = json.loads(json.dumps(Diagnosis.from_json(data).to_json()))
    assert again == {**data, "provision": __version__}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: d["verdicts"][0].update(status="maybe"),
            "doctor report.verdicts[0]: field 'status' must be one of 'runs', 'fix', 'cannot', "
            "'n/a', got 'maybe'",
        ),
        (
            lambda d: d["findings"].append({"level": "error"}),
            "doctor report.findings[{n}]: missing field 'text'",
        ),
        (
            lambda d: d["host"]["gpus"][0].update(index="0"),
            "host report.gpus[0]: field 'index' must be int, got '0'",
        ),
        (
            lambda d: d["host"]["driver"].update(colour="green"),
            "host report.driver: unknown field(s) colour",
        ),
        (lambda d: d["host"].update(schema=2), "host report schema 2 is not 1"),
        (lambda d: d.update(schema=2), "doctor report schema 2 is not 1"),
    ],
    ids=["verdict status", "finding", "gpu index", "driver field", "host schema", "schema"],
)
def test_a_bad_capture_is_refused(mutate: Callable[[dict[str, Any]], None], message: str) -> None:
    data = _capture()
    mutate(data)
    with pytest.raises(ProvisionError) as caught:
        Diagnosis.from_json(data)
    assert str(caught.value) == message.format(n=len(data["findings"]) - 1)
