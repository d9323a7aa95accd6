"""protocol/buffers.py: a buffer is handed out again only once nothing refers to it."""

from __future__ import annotations

import numpy as np

from rlinks_rllib.protocol.buffers import MIN_POOLED_BYTES, BufferPool
from rlinks_rllib.protocol.samples import encode_sample

SIZE = MIN_POOLED_BYTES * 2


def test_a_buffer_comes_back_only_when_every_view_of_it_is_gone():
    pool = BufferPool(max_bytes=4 * SIZE)
    first = pool.take(SIZE)
    view = first[10:20]  # a decoded array is a view like this
    del first
    second = pool.take(SIZE)
    assert view.base is not second  # the first is still referred to: a new one
    address = view.base.__array_interface__["data"][0]
    del view
    third = pool.take(SIZE)
    assert third.__array_interface__["data"][0] == address  # nothing refers to the first any more: reused


def test_small_buffers_and_buffers_past_the_bound_are_not_kept():
    pool = BufferPool(max_bytes=SIZE)
    assert pool.take(MIN_POOLED_BYTES - 1).nbytes == MIN_POOLED_BYTES - 1
    kept, extra = pool.take(SIZE), pool.take(SIZE)
    assert pool._kept_bytes == SIZE
    del kept, extra


def test_an_encoded_sample_is_a_copy_its_caller_may_change_at_once():
    pool = BufferPool(max_bytes=8 * SIZE)
    image = np.full(SIZE, 7, np.uint8)
    encoded = encode_sample({"image": image}, pool.take)
    image[:] = 0
    assert any(bytes(part).count(7) == SIZE for part in encoded.parts)
