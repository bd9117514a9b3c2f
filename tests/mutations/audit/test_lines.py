"""An audit row's COPY line is each column's field_text, whatever the record holds.

row_encode writes the usual record in one generated call (mutations/audit/lines.py) and any other column by
column; both must give the bytes of encoding each field on its own (field_text), the reference the writer's
COPY and row_decode are built on.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from mutations.audit import encoding

SHARED = ("preset_name", "policy_name", "source", "gpus_requested", "vgpus_granted", "vgpu_memory_mib", "containers",
          "resources_before", "patch", "explanation", "inputs", "warnings", "config_version")
OWN = tuple(name for name in encoding.COLUMNS if name not in SHARED)

# What a field may hold: what the record builder writes, and what a record from elsewhere may (None, other
# types, characters COPY escapes or drops, texts past their column, lone surrogates, non-ASCII).
TEXTS = st.one_of(
    st.sampled_from(["", "CREATE", "team-a", "llm-7b-5d9f8b7c6d-", "system:serviceaccount:kube-system:rs-controller",
                     "2026-12-05T04:28:44.507327+00:00"]),
    st.text(alphabet=st.sampled_from("ab-7\t\n\r\\\x00ü✓\ud800 "), max_size=12),
    st.sampled_from([15, 16, 17, 62, 63, 64, 127, 128, 129, 252, 253, 254, 255, 256, 257]).map(lambda n: "x" * n),
)
VALUES = st.one_of(TEXTS, st.none(), st.booleans(), st.integers(-(2 ** 40), 2 ** 40),
                   st.floats(allow_nan=False, allow_infinity=False), st.just(datetime(2026, 12, 5, 4, 28, tzinfo=UTC)))


def reference_line(record: dict) -> bytes:
    return ("\t".join(encoding.field_text(column, record.get(column.name, column.default))
                      for column in encoding.TABLE_COLUMNS) + "\n").encode("utf-8", "replace")


def own_fields(draw_values: dict) -> dict:
    return {name: value for name, value in draw_values.items() if name in OWN}


# A few fields changed at a time: the others stay as the webhook writes them, so the one-call line is tried too.
RECORDS = st.dictionaries(st.sampled_from(OWN), VALUES, max_size=3).map(own_fields)


def usual_own(n: int) -> dict:
    return {"created_at": f"2026-12-05T04:28:44.{n:06d}+00:00", "request_uid": f"uid-{n}", "operation": "CREATE",
            "namespace": "team-a", "pod_name": "", "generate_name": "llm-7b-5d9f8b7c6d-", "owner_kind": "ReplicaSet",
            "owner_name": "llm-7b-5d9f8b7c6d", "username": "system:serviceaccount:kube-system:replicaset-controller",
            "caller_verified": True, "decision": "mutated", "reason": "sized by preset llm-7b", "field": "",
            "dry_run": False, "duration_ms": 0.412, "replica": "volcano-injector-0"}


DECIDED = {"preset_name": "llm-7b", "policy_name": "team-a", "source": "serving command: vllm serve",
           "gpus_requested": "1", "vgpus_granted": 1, "vgpu_memory_mib": 24576,
           "containers": [{"container": "vllm", "vgpu_number": 1, "vgpu_memory_mib": 24576}],
           "resources_before": [{"container": "vllm", "init": False, "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
           "patch": [{"op": "replace", "path": "/spec/schedulerName", "value": "volcano"}], "explanation": None,
           "inputs": {"command": ["vllm", "serve"]}, "warnings": ["tab\there"], "config_version": 7}


@settings(max_examples=400, deadline=None)
@given(changes=RECORDS)
def test_a_row_of_shared_decided_fields_is_the_line_of_each_field_on_its_own(changes):
    own = {**usual_own(1), **changes}
    assert encoding.row_encode(encoding.shared_fields_record(own, DECIDED)) == reference_line({**own, **DECIDED})


@settings(max_examples=400, deadline=None)
@given(changes=RECORDS, decided=st.dictionaries(st.sampled_from(SHARED), VALUES, max_size=4))
def test_a_plain_record_is_the_line_of_each_field_on_its_own(changes, decided):
    record = {**usual_own(2), **DECIDED, **decided, **changes}
    assert encoding.row_encode(record) == reference_line(record)


def test_the_webhooks_usual_rows_are_each_fields_line_with_every_column_in_place():
    for n in range(3):
        own = usual_own(n)
        line = encoding.row_encode(encoding.shared_fields_record(own, DECIDED))
        assert line == reference_line({**own, **DECIDED})
        decoded = encoding.row_decode(encoding.COLUMNS, line)
        assert decoded["request_uid"] == f"uid-{n}" and decoded["warnings"] == ["tab\there"]
        assert (decoded["caller_verified"], decoded["dry_run"], decoded["duration_ms"]) == (True, False, "0.412")


def test_each_text_escaped_or_cut_in_any_column_gives_each_fields_line():
    """Every character COPY escapes or drops, and every length at and past a column's limit, in each column."""
    for column in encoding.TABLE_COLUMNS:
        if column.name not in OWN or column.kind not in ("text", "value"):
            continue
        texts = [f"a{special}b" for special in "\t\n\r\\\x00"]
        if column.limit is not None:
            texts += ["y" * column.limit, "y" * (column.limit + 1)]
        for text in texts:
            own = {**usual_own(3), column.name: text}
            assert encoding.row_encode(encoding.shared_fields_record(own, DECIDED)) == reference_line(
                {**own, **DECIDED}), (column.name, text)
            assert encoding.row_encode({**own, **DECIDED}) == reference_line({**own, **DECIDED}), (column.name, text)
