"""Images as pieces (engine/contract/): their pixels through the arena beside the token arrays, their
sequences counted as the vision tower's tokens, cut and joined with their pixels, and never in a batch
with texts (engine/queue/piece_queue.py), a request of both kept in its order."""

from __future__ import annotations

import numpy as np
import pytest

from rose_embed.engine.contract.arena import Arena, ArenaLayout
from rose_embed.engine.contract.batch import (IMAGE_TOKEN, join_packed, pack, pack_images, pack_pieces, slice_packed,
                                              split_packed)
from rose_embed.engine.contract.messages import Piece, decode_to_engine, encode, piece_figures
from rose_embed.engine.queue.piece_queue import PieceQueue, QueuedPiece

IMAGE_SIZE, SEQ_LEN = 6, 5  # 4 patches of 3 pixels a side and the class token


def pixels(num_images: int, first: float = 0.0) -> np.ndarray:
    """Images told apart by their values: image i holds first + i + (0 .. 1)."""
    ramp = np.linspace(0, 1, 3 * IMAGE_SIZE * IMAGE_SIZE, dtype=np.float32).reshape(3, IMAGE_SIZE, IMAGE_SIZE)
    return np.stack([ramp + first + i for i in range(num_images)]).astype(np.float32)


def test_images_pack_as_sequences_of_the_towers_length_and_cut_with_their_pixels():
    images = pixels(5)
    batch = pack_images(images, SEQ_LEN)
    assert batch.is_images and batch.num_seqs == 5 and batch.num_tokens == 5 * SEQ_LEN
    assert (batch.input_ids == IMAGE_TOKEN).all() and batch.max_seqlen == SEQ_LEN
    pieces = split_packed(batch, max_tokens=2 * SEQ_LEN, max_outputs=8)
    assert [p.num_seqs for p in pieces] == [2, 2, 1]
    np.testing.assert_array_equal(np.concatenate([p.pixels for p in pieces]), images)
    np.testing.assert_array_equal(slice_packed(batch, 1, 3).pixels, images[1:3])
    joined = join_packed(pieces[2], pieces[0])
    np.testing.assert_array_equal(joined.pixels, images[[4, 0, 1]])
    with pytest.raises(ValueError, match="images or texts"):
        join_packed(pieces[0], pack([np.arange(3, dtype=np.int32)]))
    seqs = [np.full(SEQ_LEN, IMAGE_TOKEN, np.int32)] * 5
    assert [p.num_seqs for p in pack_pieces(seqs, None, 3 * SEQ_LEN, 8, pixels=images)] == [3, 2]


def test_an_image_piece_goes_through_the_arena_and_its_message_bit_for_bit():
    images = pixels(3, first=-0.5)
    batch = pack_images(images, SEQ_LEN)
    figures = piece_figures(batch)
    assert figures.image_size == IMAGE_SIZE
    assert figures.num_ints == 2 * batch.num_tokens + batch.num_seqs + 1 + 3 * 3 * IMAGE_SIZE * IMAGE_SIZE
    layout = ArenaLayout.for_budget(4 * SEQ_LEN, 8, 16, pixel_floats_per_token=-(-3 * IMAGE_SIZE ** 2 // SEQ_LEN))
    # A full budget of images (4 of SEQ_LEN tokens) fits one batch's room, the kept part of the arena.
    assert piece_figures(pack_images(pixels(4), SEQ_LEN)).num_ints <= layout.reserved_ints
    arena = Arena.create(layout)
    try:
        offset = 7
        arena.write_piece(offset, batch)
        message = decode_to_engine(encode(Piece(1, 0, offset, figures.num_tokens, figures.num_seqs, figures.max_seqlen,
                                                figures.num_outputs, False, True, image_size=figures.image_size)))
        assert message.num_ints() == figures.num_ints
        read = arena.read_piece(message.offset, message.num_tokens, message.num_seqs, message.max_seqlen,
                                message.is_segmented, message.image_size)
        assert read.pixels.dtype == np.float32 and read.pixels.shape == images.shape
        np.testing.assert_array_equal(read.pixels, images)
        np.testing.assert_array_equal(read.cu_seqlens, batch.cu_seqlens)
        assert (arena.ints[offset + figures.num_ints:][:4] == 0).all()  # nothing written past its ints
    finally:
        del read
        arena.close()


def _piece(request: int, batch, index: int = 0) -> QueuedPiece:
    figures = piece_figures(batch)
    message = Piece(request, index, 0, figures.num_tokens, figures.num_seqs, figures.max_seqlen, figures.num_outputs,
                    False, index == 0, image_size=figures.image_size)
    return QueuedPiece("front end", message, batch)


def _texts(first_id: int, lengths: list[int]):
    return pack([np.full(n, first_id + i, np.int32) for i, n in enumerate(lengths)])


@pytest.mark.parametrize("scheduling", ["fair", "fcfs"])
def test_a_batch_holds_images_or_texts_and_a_request_of_both_keeps_its_order(scheduling):
    queue = PieceQueue(max_batch_tokens=100, max_batch_seqs=64, scheduling=scheduling)
    # Request 1: texts, images, texts, as a mixed request's parts come; request 2: images alone.
    queue.offer(_piece(1, _texts(100, [3, 4]), 0))
    queue.offer(_piece(1, pack_images(pixels(2), SEQ_LEN), 1))
    queue.offer(_piece(1, _texts(200, [2]), 2))
    queue.offer(_piece(2, pack_images(pixels(3, first=10), SEQ_LEN)))
    assert queue.queued_tokens == 7 + 2 * SEQ_LEN + 2 + 3 * SEQ_LEN
    cut = []
    while (batch := queue.cut()) is not None:
        kinds = {s.piece.batch.is_images for s in batch.slices}
        assert kinds == {batch.packed.is_images}  # one kind per batch
        cut.append([(s.piece.message.request, s.piece.message.index) for s in batch.slices])
    assert queue.queued_tokens == 0 and not queue
    request_1 = [key for batch in cut for key in batch if key[0] == 1]
    assert request_1 == [(1, 0), (1, 1), (1, 2)]  # in its order, each piece in a batch of its kind
    assert len(cut) == 3  # texts of request 1; the images of both requests together; request 1's last texts
    assert sorted(cut[1]) == [(1, 1), (2, 0)]


def test_a_large_request_whose_texts_run_out_mid_batch_leaves_its_images_for_a_batch_of_images():
    """Fair: two requests larger than their shares take turns; the first one's texts end inside the batch
    and its images wait, while the second one's texts fill the room left."""
    queue = PieceQueue(max_batch_tokens=40, max_batch_seqs=64)
    queue.offer(_piece(1, _texts(100, [5, 5]), 0))
    queue.offer(_piece(1, pack_images(pixels(3), SEQ_LEN), 1))
    queue.offer(_piece(2, _texts(200, [10] * 6)))
    first = queue.cut()
    assert not first.packed.is_images and first.packed.num_tokens == 40
    assert [(s.piece.message.request, s.piece.message.index) for s in first.slices] == [(1, 0), (2, 0)]
    second = queue.cut()
    assert second.packed.is_images and [s.piece.message.request for s in second.slices] == [1]
