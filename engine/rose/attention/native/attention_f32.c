/* Ragged (varlen) attention over a packed float32 stream on x86 CPUs with AVX2 and FMA.

   The float32 twin of attention_bf16.c (which says why the engine has its own CPU attention):
   the same arguments, work items and key ranges, with float32 q, k, v and output, computed
   in float32 throughout (scores, softmax, probabilities and their product with v), so its
   results match float32 SDPA to float32's rounding. Eight float32 lanes (AVX2) run on every
   x86 CPU of the last decade, AVX-512 ones included. */

#include <immintrin.h>
#include <stdint.h>

#define ATTENTION_ELEMENT float
#include "attention_common.h"

#define KEY_BLOCK 16   /* keys per score step: two 8-lane vectors */
#define SCORE_ROWS 4   /* query rows scored together: 8 independent accumulators */
#define VALUE_CHUNK 64 /* output dims accumulated in registers at a time: 8 vectors */
#define DOT_BLOCK 64   /* dims of q.k summed in registers before joining the running sum */


/* exp(x) for x <= 0: Cephes' expf polynomial, scaled by 2^n built in the exponent bits. Below
   -87.3 it returns about 1e-38 instead of 0; the caller masks keys it must not count. */
static inline __m256 exp_nonpositive(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(EXP_FLOOR));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_LO), r);
    __m256 y = _mm256_set1_ps(EXP_P5);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(EXP_P4));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(EXP_P3));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(EXP_P2));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(EXP_P1));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(EXP_P0));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), r);
    y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
    __m256i exponent = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(exponent));
}

/* All-ones in the lanes whose key index j0 + lane lies in [lo, hi). */
static inline __m256 lanes_in(int j0, int lo, int hi) {
    __m256i index = _mm256_add_epi32(_mm256_set1_epi32(j0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i at_least_lo = _mm256_cmpgt_epi32(index, _mm256_set1_epi32(lo - 1));
    __m256i below_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), index);
    return _mm256_castsi256_ps(_mm256_and_si256(at_least_lo, below_hi));
}

static inline float horizontal_sum(__m256 x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float horizontal_max(__m256 x) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* One sequence, one key/value head, every query head that reads it. HEAD_DIM is a constant in
   each instance (0: read it from the arguments). */
static inline __attribute__((always_inline)) int attend(const attention_args *a, int seq, int kv_head,
                                                        const int FIXED_HEAD_DIM) {
    const int head_dim = FIXED_HEAD_DIM ? FIXED_HEAD_DIM : a->head_dim;
    const int start = a->cu_seqlens[seq];
    const int len = a->cu_seqlens[seq + 1] - start;
    if (len <= 0) return 0;
    const int key_count = keys_of(a, seq, len);  /* its first tokens, which its queries see */
    const int padded = (len + KEY_BLOCK - 1) / KEY_BLOCK * KEY_BLOCK;

    /* Scratch: keys transposed [head_dim][padded]; scores [SCORE_ROWS][padded]; the bias by
       key - query offset, from -(len - 1) to padded - 1. */
    size_t keys_size = ((size_t)head_dim * padded * 4 + 63) & ~(size_t)63;
    size_t scores_size = ((size_t)SCORE_ROWS * padded * 4 + 63) & ~(size_t)63;
    size_t bias_size = (size_t)(len - 1 + padded) * 4;
    char *base = scratch_for(keys_size + scores_size + bias_size);
    if (!base) return -1;
    float *keys = (float *)base;
    float *scores = (float *)(base + keys_size);
    float *bias_row = (float *)(base + keys_size + scores_size);

    for (int j = 0; j < len; j++) {
        const float *row = a->k + (int64_t)(start + j) * a->k_token_stride + (int64_t)kv_head * a->k_head_stride;
        for (int d = 0; d < head_dim; d++) keys[(int64_t)d * padded + j] = row[d];
    }
    for (int d = 0; d < head_dim; d++)
        for (int j = len; j < padded; j++) keys[(int64_t)d * padded + j] = 0.0f;

    const int group = a->num_heads / a->num_kv_heads;
    for (int h = kv_head * group; h < (kv_head + 1) * group; h++) {
        const float *bias = fill_bias_row(a, h, len, padded, bias_row);
        for (int i0 = 0; i0 < len; i0 += SCORE_ROWS) {
            const int rows = len - i0 < SCORE_ROWS ? len - i0 : SCORE_ROWS;
            int lo[SCORE_ROWS], hi[SCORE_ROWS], block_lo, block_hi;
            block_key_ranges(a, i0, rows, SCORE_ROWS, key_count, lo, hi, &block_lo, &block_hi);
            const float *qrow[SCORE_ROWS];
            for (int r = 0; r < SCORE_ROWS; r++) {
                int i = i0 + (r < rows ? r : rows - 1);
                qrow[r] = a->q + (int64_t)(start + i) * a->q_token_stride + (int64_t)h * a->q_head_stride;
            }
            const int first_block = block_lo / KEY_BLOCK * KEY_BLOCK;

            for (int j0 = first_block; j0 < block_hi; j0 += KEY_BLOCK) {
                /* Summed in blocks of DOT_BLOCK dims, as a GEMM sums along K: one chain over a
                   whole head of 256 would round more. */
                for (int d0 = 0; d0 < head_dim; d0 += DOT_BLOCK) {
                    const int d_end = head_dim - d0 < DOT_BLOCK ? head_dim : d0 + DOT_BLOCK;
                    __m256 acc[SCORE_ROWS][2];
                    for (int r = 0; r < SCORE_ROWS; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
                    for (int d = d0; d < d_end; d++) {
                        __m256 k0 = _mm256_loadu_ps(keys + (int64_t)d * padded + j0);
                        __m256 k1 = _mm256_loadu_ps(keys + (int64_t)d * padded + j0 + 8);
                        for (int r = 0; r < SCORE_ROWS; r++) {
                            __m256 qd = _mm256_broadcast_ss(qrow[r] + d);
                            acc[r][0] = _mm256_fmadd_ps(qd, k0, acc[r][0]);
                            acc[r][1] = _mm256_fmadd_ps(qd, k1, acc[r][1]);
                        }
                    }
                    const int last = d_end == head_dim;
                    for (int r = 0; r < rows; r++) {
                        for (int half = 0; half < 2; half++) {
                            float *at = scores + r * padded + j0 + 8 * half;
                            __m256 s = d0 ? _mm256_add_ps(_mm256_loadu_ps(at), acc[r][half]) : acc[r][half];
                            if (last) {
                                s = _mm256_mul_ps(s, _mm256_set1_ps(a->scale));
                                if (bias) s = _mm256_add_ps(s, _mm256_loadu_ps(bias + j0 + 8 * half - (i0 + r) + len - 1));
                            }
                            _mm256_storeu_ps(at, s);
                        }
                    }
                }
            }

            for (int r = 0; r < rows; r++) {
                float *s = scores + r * padded;
                const int from = lo[r] / 8 * 8;
                __m256 vmax = _mm256_set1_ps(-__builtin_inff());
                for (int j0 = from; j0 < hi[r]; j0 += 8) {
                    __m256 in = lanes_in(j0, lo[r], hi[r]);
                    vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(_mm256_set1_ps(-__builtin_inff()), _mm256_loadu_ps(s + j0), in));
                }
                __m256 row_max = _mm256_set1_ps(horizontal_max(vmax));
                __m256 vsum = _mm256_setzero_ps();
                for (int j0 = from; j0 < hi[r]; j0 += 8) {
                    __m256 e = _mm256_and_ps(exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + j0), row_max)),
                                             lanes_in(j0, lo[r], hi[r]));
                    vsum = _mm256_add_ps(vsum, e);
                    _mm256_storeu_ps(s + j0, e);
                }
                /* every query sees itself or, hidden, one key (the engine sees to it): the sum is positive */
                const __m256 inverse_sum = _mm256_set1_ps(1.0f / horizontal_sum(vsum));

                float *o = a->out + (int64_t)(start + i0 + r) * a->out_token_stride + (int64_t)h * a->out_head_stride;
                for (int d0 = 0; d0 < head_dim; d0 += VALUE_CHUNK) {
                    const int vectors = (head_dim - d0 < VALUE_CHUNK ? head_dim - d0 : VALUE_CHUNK) / 8;
                    __m256 out[VALUE_CHUNK / 8];
                    for (int c = 0; c < VALUE_CHUNK / 8; c++) out[c] = _mm256_setzero_ps();
                    for (int j = lo[r]; j < hi[r]; j++) {
                        __m256 p = _mm256_broadcast_ss(s + j);
                        const float *vrow = a->v + (int64_t)(start + j) * a->v_token_stride
                                            + (int64_t)kv_head * a->v_head_stride + d0;
                        for (int c = 0; c < vectors; c++)
                            out[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vrow + 8 * c), out[c]);
                    }
                    for (int c = 0; c < vectors; c++)
                        _mm256_storeu_ps(o + d0 + 8 * c, _mm256_mul_ps(out[c], inverse_sum));
                }
            }
        }
    }
    return 0;
}

static int attend_any(const attention_args *a, int seq, int kv_head) {
    switch (a->head_dim) {
        case 32: return attend(a, seq, kv_head, 32);
        case 64: return attend(a, seq, kv_head, 64);
        case 128: return attend(a, seq, kv_head, 128);
        default: return attend(a, seq, kv_head, 0);
    }
}

int rose_supported_head_dim(int head_dim) { return head_dim > 0 && head_dim % 8 == 0 && head_dim <= 1024; }

int rose_attention_f32(const attention_args *a, int num_threads) { return run_items(a, num_threads, attend_any); }
