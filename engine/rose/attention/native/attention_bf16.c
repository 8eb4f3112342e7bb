/* Ragged (varlen) attention over a packed bf16 stream on x86 CPUs with AVX512-BF16.

   q [T, num_heads, head_dim], k and v [T, num_kv_heads, head_dim] (any token and head strides,
   head_dim contiguous) -> out [T, num_heads, head_dim]. Sequence b owns rows
   cu_seqlens[b]:cu_seqlens[b+1] and attends only inside them (to its first num_keys[b] rows
   where num_keys is given).

   Why it exists: PyTorch's CPU attention pays a few microseconds of library overhead per
   small matrix product, and an embedder's batch is thousands of short sequences times the
   heads, so most of its time went to overhead. Here one work item is one sequence and one
   key/value head: its keys and values are repacked once into the layouts that VDPBF16PS
   reads (bf16 pairs in 32-bit lanes), then every query row of the heads that share them is
   scored, soft-maxed and multiplied through without leaving the core.

   Numerics follow PyTorch's bf16 flash attention: q.k products exact, summed in float32;
   softmax in float32; probabilities rounded to bf16 before the product with v, summed in
   float32; one rounding of the normalized output to bf16. */

#include <immintrin.h>
#include <stdint.h>

#define ATTENTION_ELEMENT uint16_t  /* bf16 bits */
#include "attention_common.h"

#define KEY_BLOCK 16   /* keys per score vector: one float32 lane each */
#define SCORE_ROWS 8   /* query rows scored together: independent accumulators hide latency */
#define MAX_HEAD_DIM 256


/* exp(x) for x <= 0 (scores minus their row's maximum); Cephes' expf polynomial, scaled by
   2^n with VSCALEFPS. Below -87.3 the result underflows, and is flushed to 0 by the caller's
   mask where that matters. */
static inline __m512 exp_nonpositive(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(EXP_FLOOR));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_LO), r);
    __m512 y = _mm512_set1_ps(EXP_P5);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(EXP_P4));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(EXP_P3));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(EXP_P2));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(EXP_P1));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(EXP_P0));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r);
    y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, n);
}

static inline __mmask16 lanes_from(int first, int stop) {
    /* lanes first..stop-1 of a 16-lane vector (clamped to 0..16) */
    if (first < 0) first = 0;
    if (stop > 16) stop = 16;
    if (stop <= first) return 0;
    return (__mmask16)(((1u << (stop - first)) - 1u) << first);
}

static inline __m512 load_bf16_pairs(const uint32_t *p) { return _mm512_loadu_ps(p); }

/* One sequence, one key/value head, and every query head that reads it. HEAD_DIM is a
   compile-time constant in each instance, so the accumulator arrays live in registers. */
static inline __attribute__((always_inline)) int attend(const attention_args *a, int seq, int kv_head,
                                                        const int HEAD_DIM) {
    const int start = a->cu_seqlens[seq];
    const int len = a->cu_seqlens[seq + 1] - start;
    if (len <= 0) return 0;
    const int key_count = keys_of(a, seq, len);  /* its first tokens, which its queries see */
    const int pairs = HEAD_DIM / 2;       /* bf16 pairs in a row */
    const int chunks = HEAD_DIM / 16;     /* float32 vectors in a row */
    const int padded = (len + KEY_BLOCK - 1) / KEY_BLOCK * KEY_BLOCK;
    const int key_pairs = (len + 1) / 2;

    /* Scratch: keys transposed [pairs][padded]; values interleaved [key_pairs][HEAD_DIM];
       scores [SCORE_ROWS][padded] float32; probabilities [SCORE_ROWS][2 * key_pairs] bf16;
       the bias by key - query offset, from -(len - 1) to padded - 1 [len - 1 + padded]. */
    size_t keys_size = (size_t)pairs * padded * 4;
    size_t values_size = (size_t)key_pairs * HEAD_DIM * 4;
    size_t scores_size = (size_t)SCORE_ROWS * padded * 4;
    size_t probs_size = (size_t)SCORE_ROWS * key_pairs * 4;
    size_t bias_size = (size_t)(len - 1 + padded) * 4;
    char *base = scratch_for(keys_size + values_size + scores_size + probs_size + bias_size + 5 * 64);
    if (!base) return -1;
    uint32_t *keys = (uint32_t *)base;
    uint32_t *values = (uint32_t *)(base + ((keys_size + 63) & ~(size_t)63));
    float *scores = (float *)((char *)values + ((values_size + 63) & ~(size_t)63));
    uint32_t *probs = (uint32_t *)((char *)scores + ((scores_size + 63) & ~(size_t)63));
    float *bias_row = (float *)((char *)probs + ((probs_size + 63) & ~(size_t)63));

    /* keys[t][j] = bf16 pair t of key j: one 16-lane vector holds pair t of 16 keys. */
    for (int j = 0; j < len; j++) {
        const uint32_t *row = (const uint32_t *)(a->k + (int64_t)(start + j) * a->k_token_stride
                                                 + (int64_t)kv_head * a->k_head_stride);
        for (int t = 0; t < pairs; t++) keys[t * padded + j] = row[t];
    }
    for (int t = 0; t < pairs; t++)
        for (int j = len; j < padded; j++) keys[t * padded + j] = 0;

    /* values[p][d] = (v[2p][d], v[2p+1][d]): one vector holds 16 dims of two keys. */
    const __m512i low_half = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                              39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i high_half = _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24,
                                               55, 23, 54, 22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16);
    for (int p = 0; p < key_pairs; p++) {
        const uint16_t *even = a->v + (int64_t)(start + 2 * p) * a->v_token_stride + (int64_t)kv_head * a->v_head_stride;
        const uint16_t *odd = even + a->v_token_stride;
        int has_odd = 2 * p + 1 < len;
        for (int d = 0; d < HEAD_DIM; d += 32) {
            __m512i e = _mm512_loadu_si512(even + d);
            __m512i o = has_odd ? _mm512_loadu_si512(odd + d) : _mm512_setzero_si512();
            _mm512_storeu_si512(values + (int64_t)p * HEAD_DIM + d, _mm512_permutex2var_epi16(e, low_half, o));
            _mm512_storeu_si512(values + (int64_t)p * HEAD_DIM + d + 16, _mm512_permutex2var_epi16(e, high_half, o));
        }
    }

    const int group = a->num_heads / a->num_kv_heads;
    for (int h = kv_head * group; h < (kv_head + 1) * group; h++) {
        const float *bias = fill_bias_row(a, h, len, padded, bias_row);
        for (int i0 = 0; i0 < len; i0 += SCORE_ROWS) {
            const int rows = len - i0 < SCORE_ROWS ? len - i0 : SCORE_ROWS;
            int lo[SCORE_ROWS], hi[SCORE_ROWS], block_lo, block_hi;
            block_key_ranges(a, i0, rows, SCORE_ROWS, key_count, lo, hi, &block_lo, &block_hi);
            const uint32_t *qrow[SCORE_ROWS];
            for (int r = 0; r < SCORE_ROWS; r++) {
                int i = i0 + (r < rows ? r : rows - 1);
                qrow[r] = (const uint32_t *)(a->q + (int64_t)(start + i) * a->q_token_stride + (int64_t)h * a->q_head_stride);
            }
            const int first_block = block_lo / KEY_BLOCK * KEY_BLOCK;

            /* Scores of SCORE_ROWS query rows against 16 keys at a time. */
            for (int j0 = first_block; j0 < block_hi; j0 += KEY_BLOCK) {
                __m512 acc[SCORE_ROWS];
                for (int r = 0; r < SCORE_ROWS; r++) acc[r] = _mm512_setzero_ps();
                for (int t = 0; t < pairs; t++) {
                    __m512bh kv = (__m512bh)load_bf16_pairs(keys + t * padded + j0);
                    for (int r = 0; r < SCORE_ROWS; r++)
                        acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_set1_epi32((int)qrow[r][t]), kv);
                }
                for (int r = 0; r < rows; r++) {
                    __m512 s = _mm512_mul_ps(acc[r], _mm512_set1_ps(a->scale));
                    if (bias) s = _mm512_add_ps(s, _mm512_loadu_ps(bias + j0 - (i0 + r) + len - 1));
                    _mm512_storeu_ps(scores + r * padded + j0, s);
                }
            }

            /* Softmax of each row over its keys; probabilities to bf16, zero outside. */
            float inverse_sum[SCORE_ROWS];
            for (int r = 0; r < rows; r++) {
                float *s = scores + r * padded;
                __m512 vmax = _mm512_set1_ps(-__builtin_inff());
                for (int j0 = first_block; j0 < hi[r]; j0 += KEY_BLOCK) {
                    __mmask16 m = lanes_from(lo[r] - j0, hi[r] - j0);
                    vmax = _mm512_mask_max_ps(vmax, m, vmax, _mm512_loadu_ps(s + j0));
                }
                __m512 row_max = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
                __m512 vsum = _mm512_setzero_ps();
                uint16_t *p16 = (uint16_t *)(probs + r * key_pairs);
                const int pair_lo = block_lo / 2 * 2;
                for (int j0 = first_block; j0 < block_hi; j0 += KEY_BLOCK) {
                    __mmask16 m = lanes_from(lo[r] - j0, hi[r] - j0);
                    __m512 e = _mm512_maskz_mov_ps(m, exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(s + j0), row_max)));
                    vsum = _mm512_add_ps(vsum, e);
                    __m256bh e16 = _mm512_cvtneps_pbh(e);
                    /* store the lanes that fall inside [pair_lo, 2 * key_pairs) */
                    int first = pair_lo - j0 > 0 ? pair_lo - j0 : 0;
                    int stop = 2 * key_pairs - j0 < KEY_BLOCK ? 2 * key_pairs - j0 : KEY_BLOCK;
                    __mmask16 keep = lanes_from(first, stop);
                    _mm256_mask_storeu_epi16(p16 + j0, keep, (__m256i)e16);
                }
                /* a zero sum cannot happen: every query sees itself or, hidden, one key (the engine sees to it) */
                inverse_sum[r] = 1.0f / _mm512_reduce_add_ps(vsum);
            }

            /* out = probabilities x values, a row at a time, all of its dims in registers. */
            const int pair_lo = block_lo / 2, pair_hi = (block_hi + 1) / 2;
            for (int r = 0; r < rows; r++) {
                __m512 acc[MAX_HEAD_DIM / 16];
                for (int c = 0; c < chunks; c++) acc[c] = _mm512_setzero_ps();
                const uint32_t *prow = probs + r * key_pairs;
                for (int p = pair_lo; p < pair_hi; p++) {
                    __m512bh pp = (__m512bh)_mm512_set1_epi32((int)prow[p]);
                    const uint32_t *vrow = values + (int64_t)p * HEAD_DIM;
                    for (int c = 0; c < chunks; c++)
                        acc[c] = _mm512_dpbf16_ps(acc[c], pp, (__m512bh)load_bf16_pairs(vrow + 16 * c));
                }
                uint16_t *o = a->out + (int64_t)(start + i0 + r) * a->out_token_stride + (int64_t)h * a->out_head_stride;
                __m512 inv = _mm512_set1_ps(inverse_sum[r]);
                for (int c = 0; c < chunks; c++)
                    _mm256_storeu_si256((__m256i *)(o + 16 * c), (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(acc[c], inv)));
            }
        }
    }
    return 0;
}

static int attend_any(const attention_args *a, int seq, int kv_head) {
    switch (a->head_dim) {
        case 32: return attend(a, seq, kv_head, 32);
        case 64: return attend(a, seq, kv_head, 64);
        case 96: return attend(a, seq, kv_head, 96);
        case 128: return attend(a, seq, kv_head, 128);
        case 160: return attend(a, seq, kv_head, 160);
        case 192: return attend(a, seq, kv_head, 192);
        case 256: return attend(a, seq, kv_head, 256);
        default: return -2;
    }
}

int rose_supported_head_dim(int head_dim) {
    return head_dim == 32 || head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 160
           || head_dim == 192 || head_dim == 256;
}

/* Returns 0, or a negative number when scratch memory could not be had (-1) or the head
   size has no instance (-2). */
int rose_attention_bf16(const attention_args *a, int num_threads) { return run_items(a, num_threads, attend_any); }
