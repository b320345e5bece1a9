"""Typed rewrite records (issue 9): every verb writes its frozen record type, the JSON round trip
is exact, and reading is strict (a renamed key is an error, not a silent default)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import pytest

from onnxsurgeon import UsageError
from onnxsurgeon.record import (
    RECORD_TYPES,
    CopyRecord,
    ExtractRecord,
    InsertRecord,
    RerouteRecord,
    RewriteRecord,
    add_rewrite,
    records,
    rewrites,
)
from onnxsurgeon.surgery import copy, extract, insert, reroute
from onnxsurgeon.verify import verify_rewrite
from tests import builders


def _rewritten() -> list[tuple[type[RewriteRecord], object]]:
    out = []
    m = builders.tiny_cnn()
    extract(m, ["logits"], inputs=["act"])
    out.append((ExtractRecord, m))
    m = builders.tiny_cnn()
    copy(m, ["logits"], prefix="twin/")
    out.append((CopyRecord, m))
    m = builders.tiny_cnn()
    insert(m, "act", op="scale", params={"factor": 2.0})
    out.append((InsertRecord, m))
    m = builders.tiny_cnn()
    reroute(m, "act", "conv5_out", consumers=["pool"])
    out.append((RerouteRecord, m))
    return out


def test_every_verb_writes_its_typed_record_and_json_round_trips():
    for kind, model in _rewritten():
        (typed,) = records(model)
        assert type(typed) is kind
        assert typed.to_json() == rewrites(model)[0]
        assert RewriteRecord.from_json(typed.to_json()) == typed
        with pytest.raises(dataclasses.FrozenInstanceError):
            typed.rerouted = ()  # type: ignore[attr-defined]
        assert "version" not in typed.to_json()  # version 1 logs keep their bytes
    reroute_record = records(_rewritten()[3][1])[0]
    assert isinstance(reroute_record, RerouteRecord)
    assert (reroute_record.source, reroute_record.target) == ("act", "conv5_out")
    assert reroute_record.to_json()["from"] == "act"


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("rerouted"), "lacks key 'rerouted'"),
    (lambda d: d.update(form=d.pop("from")), "unknown key 'form'"),
    (lambda d: d.update(rerouted="pool"), "key 'rerouted'"),
    (lambda d: d.update(op="teleport"), "op 'teleport' is unknown"),
    (lambda d: d.update(version=99), "upgrade onnxsurgeon"),
])
def test_reading_is_strict(change, message):
    model = _rewritten()[3][1]
    data = dict(rewrites(model)[0])
    change(data)
    with pytest.raises(UsageError, match=message):
        RewriteRecord.from_json(data)
    with pytest.raises(UsageError, match=message):  # verify refuses it instead of defaulting
        verify_rewrite(builders.tiny_cnn(), model, data)
    with pytest.raises(UsageError, match=message):
        add_rewrite(builders.tiny_cnn(), data)


def test_explicit_version_1_reads_and_a_newer_record_type_writes_its_version():
    data = dict(rewrites(_rewritten()[0][1])[0], version=1)
    assert isinstance(RewriteRecord.from_json(data), ExtractRecord)

    @dataclass(frozen=True)
    class TwoRecord(RewriteRecord):
        op: ClassVar[str] = "test_two"
        VERSION: ClassVar[int] = 2
        names: tuple[str, ...]

    try:
        rec = TwoRecord(names=("a",))
        assert rec.to_json() == {"op": "test_two", "version": 2, "names": ["a"]}
        assert RewriteRecord.from_json(rec.to_json()) == rec
        assert RewriteRecord.from_json({"op": "test_two", "names": []}) == TwoRecord(names=())
    finally:
        RECORD_TYPES.pop("test_two")
