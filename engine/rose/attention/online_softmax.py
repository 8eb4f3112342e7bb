"""FlashAttention's online softmax, one key block at a time: the step both Triton attention
kernels (engine/rose/attention/packed.py, engine/rose/attention/triton_biased.py) take per block."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def online_softmax_step(scores, v, m, denom, acc, scale, PRECISION: tl.constexpr, BASE2: tl.constexpr,
                        FOLD_SCALE: tl.constexpr):
    """Fold one block of scores [M, N] (-inf where not allowed) and its values [N, D] into the
    running row maxima m, denominators and accumulator -> (m, denom, acc). BASE2: the scaled
    scores are in log2 units (exp2); else natural ones (exp). FOLD_SCALE: the scores arrive
    unscaled and `scale` goes into the exponent's FMA (one multiply per score less; base 2
    only); else they arrive scaled and `scale` is unused."""
    if FOLD_SCALE:
        m_new = tl.maximum(m, tl.max(scores, 1) * scale)
    else:
        m_new = tl.maximum(m, tl.max(scores, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no allowed key yet
    if BASE2:
        if FOLD_SCALE:
            p = tl.exp2(tl.fma(scores, scale, -m_safe[:, None]))
        else:
            p = tl.exp2(scores - m_safe[:, None])
        rescale = tl.exp2(m - m_safe)
    else:
        p = tl.exp(scores - m_safe[:, None])
        rescale = tl.exp(m - m_safe)
    denom = denom * rescale + tl.sum(p, 1)
    acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return m_new, denom, acc
