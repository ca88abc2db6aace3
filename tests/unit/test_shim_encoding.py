"""Encoded request bodies: decoded chunk by chunk, the limit on the decoded bytes, never more than it in memory; in
bounded steps, members found by offset and capped in number."""
import gzip
import random
import tracemalloc

import pytest
from backports import zstd

from shim.edge import encoding as encoding_module
from shim.edge.encoding import (
    IN_SLICE,
    MAX_MEMBERS,
    OUT_SLICE,
    RATIO_FLOOR,
    BodyDecoder,
    BodyTooLarge,
    UndecodableBody,
    UnsupportedEncoding,
    content_encoding,
)

# Hex of random bytes: compresses about 2 times, far within MAX_DECODE_RATIO past RATIO_FLOOR.
BODY = b'{"state": "' + random.Random(0).randbytes(25_000).hex().encode() + b'"}'
COMPRESS = {"gzip": gzip.compress, "zstd": zstd.compress}


@pytest.mark.parametrize("values, encoding", [([], "identity"), (["identity"], "identity"), (["gzip"], "gzip"),
                                              (["ZSTD"], "zstd"), (["identity, gzip"], "gzip")])
def test_the_encoding_named_by_the_headers(values, encoding):
    assert content_encoding(values) == encoding


@pytest.mark.parametrize("values", [["br"], ["deflate"], ["gzip, zstd"], ["gzip", "gzip"]])
def test_anything_else_is_unsupported(values):
    with pytest.raises(UnsupportedEncoding, match="send identity, gzip or zstd"):
        content_encoding(values)


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
@pytest.mark.parametrize("chunk", [1, 13, 4096, 10**6])
def test_decoded_whatever_the_chunking_and_across_members(encoding, chunk):
    raw = COMPRESS[encoding](BODY) + COMPRESS[encoding](b" ")
    decoder = BodyDecoder(encoding, len(BODY) + 1)
    for start in range(0, len(raw), chunk):
        decoder.feed(raw[start:start + chunk])
    assert decoder.body() == BODY + b" "


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
def test_one_byte_past_the_limit_decoded_is_too_large(encoding):
    with pytest.raises(BodyTooLarge):
        BodyDecoder(encoding, len(BODY) - 1).feed(COMPRESS[encoding](BODY))


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
def test_a_bomb_costs_no_more_memory_than_the_limit(encoding):
    bomb = COMPRESS[encoding](b"\0" * (64 * 1024 * 1024))
    limit = 1024 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(BodyTooLarge):
            BodyDecoder(encoding, limit).feed(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * limit


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
def test_a_stream_cut_short_or_followed_by_garbage_is_undecodable(encoding):
    raw = COMPRESS[encoding](BODY)
    short = BodyDecoder(encoding, 10**6)
    short.feed(raw[:-6])
    with pytest.raises(UndecodableBody, match="stops short"):
        short.body()
    with pytest.raises(UndecodableBody, match=f"not valid {encoding}"):
        BodyDecoder(encoding, 10**6).feed(raw + b"garbage")


def test_identity_passes_the_chunks_on_and_counts_them():
    decoder = BodyDecoder("identity", 5)
    decoder.feed(b"abc")
    decoder.feed(b"de")
    assert decoder.body() == b"abcde"
    with pytest.raises(BodyTooLarge):
        decoder.feed(b"f")


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
@pytest.mark.parametrize("in_slice, out_slice", [(1, 1), (7, 5), (100, 1000), (65536, 3)])
def test_members_are_found_by_offset_whatever_the_slices(encoding, in_slice, out_slice, monkeypatch):
    monkeypatch.setattr(encoding_module, "IN_SLICE", in_slice)
    monkeypatch.setattr(encoding_module, "OUT_SLICE", out_slice)
    parts = [BODY[:3000], b"", b"abc", BODY[:100]]
    raw = b"".join(COMPRESS[encoding](part) for part in parts)
    for chunk in (1, 13, 4096, 10**6):
        decoder = BodyDecoder(encoding, 10**6)
        for start in range(0, len(raw), chunk):
            decoder.feed(raw[start:start + chunk])
        assert decoder.body() == b"".join(parts)


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
def test_more_members_than_the_cap_are_undecodable_at_once(encoding, monkeypatch):
    empty = COMPRESS[encoding](b"")
    within = BodyDecoder(encoding, 10)
    within.feed(empty * MAX_MEMBERS)
    assert within.body() == b""
    made = []
    real = encoding_module._DECOMPRESSORS[encoding]
    monkeypatch.setitem(encoding_module._DECOMPRESSORS, encoding, lambda: made.append(1) or real())
    raw = empty * (4 * 1024 * 1024 // len(empty))  # 4 MiB of empty members
    with pytest.raises(UndecodableBody, match=f"more than {MAX_MEMBERS} {encoding}"):
        BodyDecoder(encoding, 10**6).feed(raw)
    assert len(made) == MAX_MEMBERS  # refused at the first member past the cap, the rest never decoded


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
def test_decoding_comes_in_bounded_steps(encoding):
    """Each step gives a decompressor at most IN_SLICE bytes and asks it for at most OUT_SLICE: a caller that lets
    the event loop run between steps is never held for more than one."""
    body = b"y" * (4 * OUT_SLICE)
    decoder = BodyDecoder(encoding, len(body), max_ratio=len(body))
    steps = sum(1 for _ in decoder.steps(COMPRESS[encoding](body)))
    assert steps >= 4 and decoder.body() == body
    sent = random.Random(0).randbytes(3 * IN_SLICE)  # incompressible: as many bytes sent as decoded
    decoder = BodyDecoder(encoding, len(sent))
    assert sum(1 for _ in decoder.steps(COMPRESS[encoding](sent))) >= 3 and decoder.body() == sent


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
def test_the_decoded_count_runs_across_members_and_frames(encoding):
    """Each member or frame is within the limit, their sum is not."""
    member = random.Random(1).randbytes(40_000)  # incompressible: the ratio bound stays out of the way
    raw = COMPRESS[encoding](member) * 3
    within = BodyDecoder(encoding, 3 * len(member))
    within.feed(raw)
    assert within.body() == member * 3
    with pytest.raises(BodyTooLarge) as refused:
        BodyDecoder(encoding, 2 * len(member) + 1).feed(raw)
    assert not refused.value.ratio


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
def test_past_the_floor_a_body_decodes_to_at_most_max_ratio_times_the_bytes_sent(encoding):
    body = b"[" * (4 * RATIO_FLOOR)
    sent = COMPRESS[encoding](body)
    ratio = len(body) // len(sent)
    within = BodyDecoder(encoding, 10**7, max_ratio=ratio + 1)
    within.feed(sent)
    assert within.body() == body
    with pytest.raises(BodyTooLarge) as refused:
        BodyDecoder(encoding, 10**7, max_ratio=ratio // 2).feed(sent)
    assert refused.value.ratio
    small = b"[" * RATIO_FLOOR  # up to the floor, any ratio
    floor = BodyDecoder(encoding, 10**7, max_ratio=1)
    floor.feed(COMPRESS[encoding](small))
    assert floor.body() == small


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
def test_the_ratio_counts_the_bytes_sent_so_far_across_members(encoding):
    """Many small members, each under the floor: their decoded sum still answers to the ratio."""
    member = COMPRESS[encoding](b"]" * (RATIO_FLOOR // 2))
    decoder = BodyDecoder(encoding, 10**7, max_ratio=10)
    with pytest.raises(BodyTooLarge) as refused:
        for _ in range(MAX_MEMBERS):
            decoder.feed(member)
    assert refused.value.ratio


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
def test_a_few_bytes_sent_cannot_decode_to_tens_of_kib(encoding):
    """~60 bytes of gzip decoded to 64 KiB of `[{},{},...]` unchecked (4 ms of parsing each); past RATIO_FLOOR
    (8 KiB) the ratio holds."""
    body = b"[" + b",".join([b"{}"] * 16_000) + b"]"
    sent = COMPRESS[encoding](body)
    assert len(body) // len(sent) > 200 and len(body) < 64 * 1024
    with pytest.raises(BodyTooLarge) as refused:
        BodyDecoder(encoding, 10**7, max_ratio=200).feed(sent)
    assert refused.value.ratio
