/* The CNN EIIE's trunk (portfed/agents/batched_networks.py), fused: both convolutions and their ReLUs,
 * forward and backward, for parties k0 … k1 − 1 (split over threads: vectors.h), TILE rows (one asset's window on one batch day) at a
 * time with every intermediate in registers or L1.  For party k, row r (F features × L days, W = L − 2):
 *
 *   conv 1×3   h1[c, w] = relu(b1[c] + Σ_{f,s} K1[c, f, s] x[f, w + s])           (C maps)
 *   conv 1×W   h2[d]    = relu(b2[d] + Σ_{c,w} K2[d, c, w] h1[c, w])              (D maps)
 *
 *   backward   g2 = ∂h2 ⊙ [h2 > 0],  g1[c, w] = (Σ_d K2[d, c, w] g2[d]) ⊙ [h1 > 0],
 *              ∂b2 = Σ_r g2,  ∂K2[d, c, w] = Σ_r g2[d] h1[c, w],
 *              ∂b1[c] = Σ_{r,w} g1[c, w],  ∂K1[c, f, s] = Σ_{r,w} g1[c, w] x[f, w + s]
 *
 * (Jiang, Xu & Liang 2017, Fig. 2's first two layers).  Nothing is saved between the passes but the
 * output h2: the backward pass reads the windows again and recomputes h1 (C·W·F·3 multiply-adds per row,
 * a fifth of the pass), so no intermediate goes through memory.  The rows are the engine's input rows
 * in any column order (columns[f·L + j]: the column of feature f on day j), 16 rows turned into lane
 * vectors by 16 × 16 register transposes (the maps go out the same way, as the (K, R, D) rows the head
 * reads); ∂K2 sums over all rows of a party as one register-blocked product over the tiles' g2 and h1,
 * kept in a small buffer (L2).  Each lane sums its own rows, the lanes are added in double
 * at the end, so the results agree with PyTorch's products to float32 round-off, not bit for bit.
 * FEATURES, WINDOW, CONV_MAPS and DENSE_MAPS are compile-time constants (portfed/agents/native.py
 * compiles one library per shape), so every loop over maps unrolls and the accumulators are registers.
 * cnn_forward and cnn_backward are the two passes of an autograd step (the actor-critic learner, PyTorch's
 * head); cnn_step is the direct learner's whole step, both passes around the head and reward of head.h,
 * one party at a time so that its rows stay in cache between the passes. */
#include "vectors.h"
#define MAPS DENSE_MAPS
#include "head.h"

#if !defined(FEATURES) || !defined(WINDOW) || !defined(CONV_MAPS) || !defined(DENSE_MAPS)
#error "compile with -DFEATURES=F -DWINDOW=L -DCONV_MAPS=C -DDENSE_MAPS=D"
#endif
#define F FEATURES
#define L WINDOW
#define W (WINDOW - 2)
#define C CONV_MAPS
#define D DENSE_MAPS
#define CW (C * W) /* h1's length */
#define GB 14      /* positions of g1 per register block */

/* The tile's windows: x[f·L + j] = feature f on day j of rows r0 … r0 + n − 1 (rows: the party's (R, width);
 * row: a buffer of width vectors). */
static inline void load_windows(vf *x, vf *row, const float *rows, int width, const int *columns, int r0, int n) {
    vtranspose_rows(row, rows + (long)r0 * width, width, width, n);
    for (int q = 0; q < F * L; q++) x[q] = row[columns[q]];
}

/* h1 = relu(b1 + conv1(x)) of one tile (k1: the party's (C, F, 3) weights). */
static inline void first_maps(vf *h1, const vf *x, const float *k1, const float *b1) {
    for (int c = 0; c < C; c++)
        for (int w = 0; w < W; w++) {
            vf acc = splat(b1[c]);
            UNROLL
            for (int f = 0; f < F; f++)
                UNROLL
                for (int s = 0; s < 3; s++) acc += k1[(c * F + f) * 3 + s] * x[f * L + w + s];
            h1[c * W + w] = vrelu(acc);
        }
}

/* One party's forward pass.  rk: its (R, width) input rows; kw1: (C·F·3); kb1: (C); kw2: (D·C·W); kb2: (D);
 * out: (R, D) ← h2 (each tile's D lane vectors transposed into its rows on the way out). */
static void forward_party(int R, int width, const float *rk, const int *columns, const float *kw1, const float *kb1,
                          const float *kw2, const float *kb2, float *out) {
    vf row[width]; /* a tile's rows as lane vectors, before the columns are picked */
    for (int r0 = 0; r0 < R; r0 += TILE) {
        const int n = R - r0 < TILE ? R - r0 : TILE;
        vf x[F * L], h1[CW], acc[D]; /* acc: registers */
        load_windows(x, row, rk, width, columns, r0, n);
        first_maps(h1, x, kw1, kb1);
        UNROLL
        for (int d = 0; d < D; d++) acc[d] = splat(kb2[d]);
        for (int q = 0; q < CW; q++) {
            const vf h = h1[q];
            UNROLL
            for (int d = 0; d < D; d++) acc[d] += kw2[d * CW + q] * h;
        }
        UNROLL
        for (int d = 0; d < D; d++) acc[d] = vrelu(acc[d]);
        vstore_rows(out + (long)r0 * D, D, D, n, acc); /* the rows of (R, D), as the head reads them */
    }
}

/* Vectors of scratch a thread's backward passes need for R rows: the tiles' g2 and h1, and ∂K2's sums. */
static size_t backward_scratch(int R) { return (size_t)((R + TILE - 1) / TILE) * (D + CW) + (size_t)D * CW; }

/* One party's backward pass.  rk, columns, kw1, kb1, kw2: as the forward's; maps: (R, D) its output h2; grad:
 * (R, D) ∂h2; gw1: (C·F·3) ← ∂K1; gb1: (C) ← ∂b1; gw2: (D·C·W) ← ∂K2; gb2: (D) ← ∂b2; buffer: backward_scratch(R)
 * vectors. */
static void backward_party(int R, int width, const float *rk, const int *columns, const float *kw1, const float *kb1,
                           const float *kw2, const float *maps, const float *grad, float *gw1, float *gb1, float *gw2,
                           float *gb2, vf *buffer) {
    const int tiles = (R + TILE - 1) / TILE;
    vf *gs = buffer, *hs = buffer + (size_t)tiles * D, *total = hs + (size_t)tiles * CW, row[width];
    vf sum_w1[C * F * 3], sum_b1[C], sum_b2[D];
    for (int i = 0; i < C * F * 3; i++) sum_w1[i] = splat(0.0f);
    for (int c = 0; c < C; c++) sum_b1[c] = splat(0.0f);
    for (int d = 0; d < D; d++) sum_b2[d] = splat(0.0f);
    for (int t = 0; t < tiles; t++) {
        const int r0 = t * TILE, n = R - r0 < TILE ? R - r0 : TILE;
        vf x[F * L], *h1 = hs + (long)t * CW, *g2 = gs + (long)t * D, g1[CW];
        load_windows(x, row, rk, width, columns, r0, n);
        first_maps(h1, x, kw1, kb1);
        vf h2[D];
        vtranspose_rows(g2, grad + (long)r0 * D, D, D, n);
        vtranspose_rows(h2, maps + (long)r0 * D, D, D, n);
        UNROLL
        for (int d = 0; d < D; d++) {
            g2[d] = vrelu_grad(g2[d], h2[d]);
            sum_b2[d] += g2[d];
        }
        for (int q0 = 0; q0 < CW; q0 += GB) { /* g1 = (K2ᵀ g2) ⊙ [h1 > 0], GB positions at a time */
            const int count = CW - q0 < GB ? CW - q0 : GB;
            vf acc[GB];
            UNROLL
            for (int i = 0; i < GB; i++) acc[i] = splat(0.0f);
            for (int d = 0; d < D; d++) {
                const vf g = g2[d];
                const float *weights = kw2 + d * CW + q0;
                if (count == GB) {
                    UNROLL
                    for (int i = 0; i < GB; i++) acc[i] += weights[i] * g;
                } else {
                    for (int i = 0; i < count; i++) acc[i] += weights[i] * g;
                }
            }
            for (int i = 0; i < count; i++) g1[q0 + i] = vrelu_grad(acc[i], h1[q0 + i]);
        }
        for (int c = 0; c < C; c++) { /* ∂K1 and ∂b1 of map c: F·3 + 1 accumulators in registers */
            vf acc[F * 3], bias = splat(0.0f);
            UNROLL
            for (int i = 0; i < F * 3; i++) acc[i] = splat(0.0f);
            for (int w = 0; w < W; w++) {
                const vf g = g1[c * W + w];
                bias += g;
                UNROLL
                for (int f = 0; f < F; f++)
                    UNROLL
                    for (int s = 0; s < 3; s++) acc[f * 3 + s] += g * x[f * L + w + s];
            }
            sum_b1[c] += bias;
            UNROLL
            for (int i = 0; i < F * 3; i++) sum_w1[c * F * 3 + i] += acc[i];
        }
    }
    for (int i = 0; i < D * CW; i++) total[i] = splat(0.0f);
    outer_sums(total, gs, hs, D, CW, tiles); /* ∂K2 = Σ_t g2_tᵀ h1_t over the party's tiles */
    for (int i = 0; i < D * CW; i++) gw2[i] = lanes_sum(total[i]);
    for (int i = 0; i < C * F * 3; i++) gw1[i] = lanes_sum(sum_w1[i]);
    for (int c = 0; c < C; c++) gb1[c] = lanes_sum(sum_b1[c]);
    for (int d = 0; d < D; d++) gb2[d] = lanes_sum(sum_b2[d]);
}

static int forward_range(int k0, int k1, int R, int width, const float *rows, const int *columns, const float *w1,
                         const float *b1, const float *w2, const float *b2, float *out) {
    for (int k = k0; k < k1; k++)
        forward_party(R, width, rows + (long)k * R * width, columns, w1 + (long)k * C * F * 3, b1 + (long)k * C,
                      w2 + (long)k * D * CW, b2 + (long)k * D, out + (long)k * R * D);
    return 0;
}

/* Forward.  rows: (K, R, width) input rows; columns: (F·L); w1: (K, C·F·3); b1: (K, C); w2: (K, D·C·W);
 * b2: (K, D); out: (K, R, D) ← h2. */
void cnn_forward(int threads, int k0, int k1, int R, int width, const float *rows, const int *columns,
                 const float *w1, const float *b1, const float *w2, const float *b2, float *out) {
    int status = 0;
    OVER_PARTIES(forward_range(lo, hi, R, width, rows, columns, w1, b1, w2, b2, out))
    (void)status;
}

static int backward_range(int k0, int k1, int R, int width, const float *rows, const int *columns,
                          const float *w1, const float *b1, const float *w2, const float *maps, const float *grad,
                          float *gw1, float *gb1, float *gw2, float *gb2) {
    vf *buffer = aligned_alloc(sizeof(vf), backward_scratch(R) * sizeof(vf));
    if (buffer == NULL) return -1;
    for (int k = k0; k < k1; k++)
        backward_party(R, width, rows + (long)k * R * width, columns, w1 + (long)k * C * F * 3, b1 + (long)k * C,
                       w2 + (long)k * D * CW, maps + (long)k * R * D, grad + (long)k * R * D, gw1 + (long)k * C * F * 3,
                       gb1 + (long)k * C, gw2 + (long)k * D * CW, gb2 + (long)k * D, buffer);
    free(buffer);
    return 0;
}

/* Backward.  rows, columns, w1, b1, w2: as the forward's; maps: (K, R, D) its output h2; grad: (K, R, D)
 * ∂h2; gw1: (K, C·F·3) ← ∂K1; gb1: (K, C) ← ∂b1; gw2: (K, D·C·W) ← ∂K2; gb2: (K, D) ← ∂b2.
 * Returns 0, or −1 when out of memory. */
int cnn_backward(int threads, int k0, int k1, int R, int width, const float *rows, const int *columns,
                 const float *w1, const float *b1, const float *w2, const float *maps, const float *grad, float *gw1,
                 float *gb1, float *gw2, float *gb2) {
    int status = 0;
    OVER_PARTIES(backward_range(lo, hi, R, width, rows, columns, w1, b1, w2, maps, grad, gw1, gb1, gw2, gb2))
    return status;
}

static int step_range(int k0, int k1, int B, int M, int width, double commission, const float *windows,
                      const int *first_rows, const int *columns, const float *w1, const float *b1, const float *w2,
                      const float *b2, const float *head, const float *previous, const float *y_now,
                      const float *y_next, const unsigned char *padded, float *weights, float *rewards, float *gw1,
                      float *gb1, float *gw2, float *gb2, float *ghead) {
    const int R = B * M;
    vf *buffer = aligned_alloc(sizeof(vf), backward_scratch(R) * sizeof(vf));
    float *maps = malloc((size_t)2 * R * D * sizeof(float));
    if (buffer == NULL || maps == NULL) {
        free(buffer);
        free(maps);
        return -1;
    }
    float *grad = maps + (size_t)R * D;
    for (int k = k0; k < k1; k++) {
        const float *rk = windows + (long)first_rows[k] * M * width; /* the batch's B consecutive days, in place */
        const float *kw1 = w1 + (long)k * C * F * 3, *kb1 = b1 + (long)k * C, *kw2 = w2 + (long)k * D * CW;
        const long days = (long)k * B * (M + 1);
        forward_party(R, width, rk, columns, kw1, kb1, kw2, b2 + (long)k * D, maps);
        head_party(B, M, commission, maps, D, 1, head + (long)k * (D + 3), previous + days, y_now + days, y_next + days,
                   padded == NULL ? NULL : padded + (long)k * M, weights + days, rewards + (long)k * B, grad,
                   ghead + (long)k * (D + 3));
        backward_party(R, width, rk, columns, kw1, kb1, kw2, maps, grad, gw1 + (long)k * C * F * 3, gb1 + (long)k * C,
                       gw2 + (long)k * D * CW, gb2 + (long)k * D, buffer);
    }
    free(maps);
    free(buffer);
    return 0;
}

/* The direct learner's whole step for parties k0 … k1 − 1, one party at a time: the forward pass, the head and
 * the reward with their gradient (head.h), the backward pass — a party's rows are read from memory once and
 * stay in cache (L2) for the backward pass, its maps and their gradient never leave it.  windows: the
 * engine's stacked input rows (days, M, width); first_rows: (K) the row of each party's first batch day (its
 * B days are consecutive rows); w1, b1, w2, b2: as the forward's; head: (K, D + 3); previous, y_now, y_next:
 * (K, B, M + 1); padded: (K, M) or NULL; weights ← (K, B, M + 1); rewards ← (K, B); gw1, gb1, gw2, gb2: as
 * the backward's; ghead ← (K, D + 3).  Returns 0, or −1 when out of memory. */
int cnn_step(int threads, int k0, int k1, int B, int M, int width, double commission, const float *windows,
             const int *first_rows, const int *columns, const float *w1, const float *b1, const float *w2,
             const float *b2, const float *head, const float *previous, const float *y_now, const float *y_next,
             const unsigned char *padded, float *weights, float *rewards, float *gw1, float *gb1, float *gw2,
             float *gb2, float *ghead) {
    int status = 0;
    OVER_PARTIES(step_range(lo, hi, B, M, width, commission, windows, first_rows, columns, w1, b1, w2, b2, head,
                            previous, y_now, y_next, padded, weights, rewards, gw1, gb1, gw2, gb2, ghead))
    return status;
}

/* Whether the entry points split their parties over OpenMP threads (vectors.h), read by portfed/agents/native.py. */
int openmp(void) { return OPENMP; }
