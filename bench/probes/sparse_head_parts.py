"""Where a SPLADE batch's head time goes on a GPU, part by part, and what the candidate fixes save.

One question: the sparse arm of bench/heads.py runs at about half the dense arm's speed on BERT-base,
though the MLM head adds about a quarter of the encoder's FLOPs. This probe times, on one batch of
--tokens tokens in --segments texts, random BERT-base-shaped weights in bfloat16:

  encoder       not timed here (bench/heads.py's dense arm is its speed)
  mlm chunked   the MLM head as SparseHead runs it: chunks of 2**25 / V tokens, V = 30,522
  mlm one       the same head on the whole batch at once
  mlm padded    the decoder's rows padded to a multiple of 128 (unused rows: weight 0, logit 0)
  segmax        the Triton segment max over the chunks' logits (fused.segment_maxes_into)
  topk 2048     torch.topk of the [S, V] pooled vectors, K = 2,048 (the cap of a model without top-k)
  compact       the same rows without a sort: each non-zero's slot from a running count (cumsum)
  head now      SparseHead.forward as the engine runs it
  head fixed    padded decoder + segmax + compact, the head this probe argues for

Prints a table of milliseconds per batch (median of --repeats, CUDA events, after warm-up).

  python3 bench/probes/sparse_head_parts.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib.common import cuda_event_ms
from rose_embed.engine.rose.layers import fused

HIDDEN, VOCAB, K = 768, 30522, 2048
CHUNK = max(64, 2**25 // VOCAB)


def timed(fn, repeats: int) -> float:
    if not torch.cuda.is_available():  # a smoke run on a CPU: the checks, no timings worth reading
        fn()
        return float("nan")
    return cuda_event_ms(fn, repeats)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--segments", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    dev, dt = torch.device("cuda" if torch.cuda.is_available() else "cpu"), torch.bfloat16
    torch.manual_seed(0)
    hidden = torch.randn(args.tokens, HIDDEN, device=dev, dtype=dt)
    dense_w = torch.randn(HIDDEN, HIDDEN, device=dev, dtype=dt) / HIDDEN**0.5
    dense_b = torch.zeros(HIDDEN, device=dev, dtype=dt)
    ln_w, ln_b = torch.ones(HIDDEN, device=dev, dtype=dt), torch.zeros(HIDDEN, device=dev, dtype=dt)
    dec_w = torch.randn(VOCAB, HIDDEN, device=dev, dtype=dt) / HIDDEN**0.5
    dec_b = torch.full((VOCAB,), -4.0, device=dev, dtype=dt)  # about 200 non-zeros a text, as trained models keep
    padded = (VOCAB + 127) // 128 * 128
    dec_w_p = torch.zeros(padded, HIDDEN, device=dev, dtype=dt)
    dec_w_p[:VOCAB] = dec_w
    dec_b_p = torch.zeros(padded, device=dev, dtype=dt)
    dec_b_p[:VOCAB] = dec_b
    seg = torch.arange(args.tokens, device=dev) * args.segments // args.tokens

    def transform(x):
        return F.layer_norm(F.gelu(F.linear(x, dense_w, dense_b)), (HIDDEN,), ln_w, ln_b)

    def mlm_chunked():
        for s in range(0, args.tokens, CHUNK):
            F.linear(transform(hidden[s:s + CHUNK]), dec_w, dec_b)

    def mlm_padded_chunked():
        for s in range(0, args.tokens, CHUNK):
            F.linear(transform(hidden[s:s + CHUNK]), dec_w_p, dec_b_p)

    def mlm_one():
        F.linear(transform(hidden), dec_w, dec_b)

    def mlm_padded_one():
        F.linear(transform(hidden), dec_w_p, dec_b_p)

    logits = F.linear(transform(hidden[:CHUNK]), dec_w, dec_b)
    logits_p = F.linear(transform(hidden[:CHUNK]), dec_w_p, dec_b_p)
    pooled = torch.zeros(args.segments + 1, VOCAB, device=dev)

    def segmax():
        for s in range(0, args.tokens, CHUNK):
            n = min(CHUNK, args.tokens - s)
            fused.segment_maxes_into(pooled, logits[:n], seg[s:s + n])

    def segmax_padded():
        for s in range(0, args.tokens, CHUNK):
            n = min(CHUNK, args.tokens - s)
            fused.segment_maxes_into(pooled, logits_p[:n, :VOCAB], seg[s:s + n])

    full = torch.zeros(args.segments + 1, VOCAB, device=dev)
    for s in range(0, args.tokens, CHUNK):
        fused.segment_maxes_into(full, F.linear(transform(hidden[s:s + CHUNK]), dec_w, dec_b), seg[s:s + CHUNK])
    vectors = full[:args.segments].log1p()

    def topk():
        count = (vectors > 0).sum(dim=1, keepdim=True).float()
        values, indices = torch.topk(vectors, K, dim=1, sorted=True)
        return torch.cat([count, indices.float(), values], dim=1)

    cols = torch.arange(VOCAB, device=dev, dtype=torch.float32).expand(args.segments, -1)

    def compact():
        nonzero = vectors > 0
        slot = nonzero.cumsum(dim=1) - 1
        count = slot[:, -1:] + 1
        slot = torch.where(nonzero & (slot < K), slot, K)  # K: a spare slot past the row, dropped
        rows = torch.zeros(args.segments, 2 * (K + 1), device=dev)
        rows[:, :K + 1].scatter_(1, slot, cols)
        rows[:, K + 1:].scatter_(1, slot, vectors)
        return torch.cat([count.float(), rows[:, :K], rows[:, K + 1:2 * K + 1]], dim=1)

    def head_now():
        p = torch.zeros(args.segments + 1, VOCAB, device=dev)
        for s in range(0, args.tokens, CHUNK):
            fused.segment_maxes_into(p, F.linear(transform(hidden[s:s + CHUNK]), dec_w, dec_b), seg[s:s + CHUNK])
        v = p[:args.segments].log1p_()
        count = (v > 0).sum(dim=1, keepdim=True).float()
        values, indices = torch.topk(v, K, dim=1, sorted=True)
        return torch.cat([count, indices.float(), values], dim=1)

    big_chunk = max(64, 2**26 // padded)

    def head_fixed():
        p = torch.zeros(args.segments + 1, VOCAB, device=dev)
        for s in range(0, args.tokens, big_chunk):
            lg = F.linear(transform(hidden[s:s + big_chunk]), dec_w_p, dec_b_p)
            fused.segment_maxes_into(p, lg[:, :VOCAB], seg[s:s + big_chunk])
        return p

    # The compaction's answer equals topk's set of (index, value) pairs.
    a, b = topk(), compact()
    assert torch.equal(a[:, 0], b[:, 0]), "counts differ"
    n = int(a[:, 0].max().item())
    assert n <= K, f"a text has {n} non-zeros, more than {K}"
    for r in range(args.segments):
        c = int(a[r, 0].item())
        ia, ib = a[r, 1:1 + c], b[r, 1:1 + c]
        va, vb = a[r, 1 + K:1 + K + c], b[r, 1 + K:1 + K + c]
        oa, ob = ia.argsort(), ib.argsort()
        assert torch.equal(ia[oa], ib[ob]) and torch.equal(va[oa], vb[ob]), f"row {r} differs"
    print(f"check: compaction equals topk on {args.segments} rows (median non-zeros "
          f"{int(a[:, 0].median().item())}, largest {n})")

    parts = [("mlm chunked", mlm_chunked), ("mlm padded chunked", mlm_padded_chunked), ("mlm one", mlm_one),
             ("mlm padded one", mlm_padded_one), ("segmax", segmax), ("segmax padded stride", segmax_padded),
             ("topk 2048", topk), ("compact", compact), ("head now", head_now), ("head fixed (no rows)", head_fixed)]
    flops = 2 * args.tokens * HIDDEN * (VOCAB + HIDDEN)
    print(f"\n{args.tokens} tokens, {args.segments} texts, V {VOCAB} (padded {padded}), chunk {CHUNK}, K {K}, "
          f"{torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}")
    print("| part | ms per batch | TFLOP/s of the MLM head |")
    print("|---|---|---|")
    for name, fn in parts:
        ms = timed(fn, args.repeats)
        print(f"| {name} | {ms:.3f} | {flops / ms / 1e9:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
