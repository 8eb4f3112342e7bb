/* What the CPU attention kernels (attention_bf16.c, attention_f32.c) share: their arguments,
   per-thread scratch, which keys a query sees, the position bias laid out by offset, and the
   OpenMP loop over work items. A kernel defines ATTENTION_ELEMENT (its q, k, v and output
   element type) before including this file. */

#ifndef ROSE_ATTENTION_COMMON_H
#define ROSE_ATTENTION_COMMON_H

#include <stdint.h>
#include <stdlib.h>

/* exp(x) for x <= 0 as both kernels compute it, in their own vector width: Cephes' expf. x is
   clamped at EXP_FLOOR, split as n ln2 + r (ln2 in two parts for precision), and
   e^r = 1 + r + r^2 (P0 + P1 r + ... + P5 r^5), scaled by 2^n. */
#define EXP_FLOOR -87.3f
#define EXP_LOG2E 1.44269504088896341f
#define EXP_LN2_HI 0.693359375f
#define EXP_LN2_LO -2.12194440e-4f
#define EXP_P5 1.9875691500e-4f
#define EXP_P4 1.3981999507e-3f
#define EXP_P3 8.3334519073e-3f
#define EXP_P2 4.1665795894e-2f
#define EXP_P1 1.6666665459e-1f
#define EXP_P0 5.0000001201e-1f

typedef struct {
    const ATTENTION_ELEMENT *q, *k, *v;
    ATTENTION_ELEMENT *out;
    int64_t q_token_stride, q_head_stride;
    int64_t k_token_stride, k_head_stride;
    int64_t v_token_stride, v_head_stride;
    int64_t out_token_stride, out_head_stride;
    const int32_t *cu_seqlens;
    int32_t num_seqs, num_heads, num_kv_heads, head_dim;
    float scale;
    int32_t is_causal;
    int32_t window_left, window_right;  /* keys a query sees around it; negative: unbounded */
    const float *position_bias;         /* [num_heads, 2 * bias_radius + 1] or NULL */
    int32_t bias_radius;
    const int32_t *num_keys;            /* [num_seqs]: the first tokens of each sequence that are keys; NULL: all */
} attention_args;

/* Per-thread scratch, grown as longer sequences come; kept for the process's life. */
static __thread char *scratch;
static __thread size_t scratch_size;

static void *scratch_for(size_t size) {
    if (size > scratch_size) {
        free(scratch);
        scratch = aligned_alloc(64, (size + 63) & ~(size_t)63);
        scratch_size = scratch ? size : 0;
    }
    return scratch;
}

/* The keys of a sequence: its first num_keys tokens (all its tokens stay queries), else all `len`. */
static inline int keys_of(const attention_args *a, int seq, int len) {
    return a->num_keys ? a->num_keys[seq] : len;
}

/* The keys a query row sees, [*lo, *hi), of the sequence's first `keys` tokens. */
static inline void key_range(const attention_args *a, int i, int keys, int *lo, int *hi) {
    int first = 0, stop = keys;
    if (a->is_causal && i + 1 < stop) stop = i + 1;
    if (a->window_left >= 0 && i - a->window_left > first) first = i - a->window_left;
    if (a->window_right >= 0 && i + a->window_right + 1 < stop) stop = i + a->window_right + 1;
    *lo = first;
    *hi = stop;
}

/* The key ranges of `count` query rows from i0 (rows past the sequence's `rows` repeat its last
   row, so that a block of fixed size can be scored whole), and the keys any of them sees,
   [*block_lo, *block_hi), of the sequence's first `keys` tokens. */
static inline void block_key_ranges(const attention_args *a, int i0, int rows, int count, int keys, int *lo, int *hi,
                                    int *block_lo, int *block_hi) {
    *block_lo = keys;
    *block_hi = 0;
    for (int r = 0; r < count; r++) {
        key_range(a, i0 + (r < rows ? r : rows - 1), keys, &lo[r], &hi[r]);
        if (lo[r] < *block_lo) *block_lo = lo[r];
        if (hi[r] > *block_hi) *block_hi = hi[r];
    }
}

/* Head h's position bias by key - query offset: bias_row[o + len - 1] for o from -(len - 1) to
   padded - 1, clamped to the table's radius. NULL where the model has no position bias. */
static inline const float *fill_bias_row(const attention_args *a, int h, int len, int padded, float *bias_row) {
    if (!a->position_bias) return NULL;
    const float *bias = a->position_bias + (int64_t)h * (2 * a->bias_radius + 1);
    for (int o = -(len - 1); o < padded; o++) {
        int c = o < -a->bias_radius ? -a->bias_radius : (o > a->bias_radius ? a->bias_radius : o);
        bias_row[o + len - 1] = bias[c + a->bias_radius];
    }
    return bias_row;
}

/* Every (sequence, key/value head) item through attend_item over num_threads OpenMP threads.
   Returns 0, or the most negative status an item returned. Items run longest sequence first
   would balance better; dynamic scheduling in small chunks is close enough for an embedder's
   lengths and keeps the order simple. */
static int run_items(const attention_args *a, int num_threads, int (*attend_item)(const attention_args *, int, int)) {
    const int items = a->num_seqs * a->num_kv_heads;
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 4) num_threads(num_threads) reduction(min : failed)
    for (int item = 0; item < items; item++) {
        int status = attend_item(a, item / a->num_kv_heads, item % a->num_kv_heads);
        if (status < failed) failed = status;
    }
    return failed;
}

#endif
