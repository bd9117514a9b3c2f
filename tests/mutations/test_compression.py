"""The audit's detail compression: what a value compresses to does not depend on what was compressed before."""

import lz4.block
import orjson

from mutations import compression


def test_a_value_seen_again_compresses_to_the_same_bytes_and_reads_back():
    patch = orjson.dumps([{"op": "add", "path": "/metadata/annotations/volcano-injector.io~1applied-preset",
                           "value": "llm-7b"}])
    first, again = compression.detail_compress(patch), compression.detail_compress(patch)
    direct = bytes((compression.DICTIONARY,)) + lz4.block.compress(
        patch, dict=compression.DICTIONARIES[compression.DICTIONARY], store_size=True)
    assert first == again == direct
    assert compression.detail_decompress(again) == patch
    explained = compression.detail_compress(patch, 2)  # another dictionary, another entry
    assert explained[0] == 2 and compression.detail_decompress(explained) == patch


def test_what_is_remembered_stays_bounded(monkeypatch):
    monkeypatch.setattr(compression, "_MEMO", {})
    for i in range(compression.MEMO_ENTRIES + 10):
        compression.detail_compress(b'{"n":%d}' % i)
    assert len(compression._MEMO) <= compression.MEMO_ENTRIES
    large = b'"' + b"x" * (compression.MEMO_MAX_BYTES + 1) + b'"'
    compression.detail_compress(large)
    assert (compression.DICTIONARY, large) not in compression._MEMO
    assert compression.detail_decompress(compression.detail_compress(large)) == large


def test_a_raw_value_reads_back_as_its_text():
    assert compression.detail_decompress(b"\x00" + b'{"a":1}') == b'{"a":1}'
