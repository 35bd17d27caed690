/* The sequential part of the batched recurrent EIIE (portfed/agents/batched_recurrent.py), fused.
 *
 * The day loop of the recurrence and of its backpropagation through time, for parties k0 … k1 − 1
 * (inputs x: (K, F, l, R), R = B·m sequences contiguous), with the
 * input projection A_j = W_ih x_j + b (F ≤ a few features: a few multiply-adds per unit) folded into
 * the forward pass and the weight gradients Σ δ_j, Σ δ_j x_jᵀ, Σ δ_j h_{j−1}ᵀ into the backward one
 * (sums_t below: no δ_j is ever written to memory); here:
 *
 *   Elman  forward   h_j = tanh(A_j + W_hh h_{j−1}),                 h_0 = 0
 *          backward  δ_j = ∂h_j ⊙ (1 − h_j²),  ∂h_{j−1} = W_hhᵀ δ_j
 *   LSTM   forward   [i f g o] = [σ σ tanh σ](A_j + W_hh h_{j−1}),   c_j = f ⊙ c_{j−1} + i ⊙ g,
 *                    h_j = o ⊙ tanh c_j,                               h_0 = c_0 = 0
 *          backward  ∂c_j += ∂h_j ⊙ o ⊙ (1 − tanh² c_j),
 *                    δ_j = [∂c_j g i(1 − i), ∂c_j c_{j−1} f(1 − f), ∂c_j i (1 − g²), ∂h_j tanh c_j o(1 − o)],
 *                    ∂c_{j−1} = ∂c_j ⊙ f,  ∂h_{j−1} = W_hhᵀ δ_j
 *
 * Why it is fast: TILE sequences at a time run through *all* days while their hidden state stays in
 * registers and the (G·H) × H weights in L1, so the W_hh products are register-blocked broadcast
 * multiply-adds with no pass through memory between the products and the nonlinearities (PyTorch
 * runs each of them as a kernel over megabytes, several per day).  HIDDEN (H) is a compile-time
 * constant (portfed/agents/native.py compiles one library per hidden size), so the loops over
 * units unroll and the accumulators are registers.
 *
 * tanh and σ are computed here from vectorised polynomials (vexp, vsigmoid below: within about one float32
 * ulp of the exact values, as PyTorch's own vectorised kernels; vtanh, a rational function: within 5 ulp),
 * so the results agree with PyTorch's to float32 round-off, not bit for bit.  No libm call in the day loops (the
 * direct learner's head, head.h, calls exp and log), no -ffast-math; subnormals are flushed to zero while the
 * kernels run (vectors.h, OVER_PARTIES), and the caller's floating-point state is restored.
 */
#include "vectors.h"

#ifndef HIDDEN
#error "compile with -DHIDDEN=<hidden size>"
#endif
#define H HIDDEN
#define MAPS HIDDEN
#include "head.h"

/* e^r − 1 for y = n ln 2 + r, |r| ≤ ln 2 / 2 (Cody & Waite's two-part ln 2; n ← the integer), by its Taylor
 * polynomial r + r² (1/2 + r/6 + … + r^5/5040) (remainder < 1e-8 relative), with no cancellation near 0. */
static inline vf expm1_reduced(vf y, vf *n) {
    *n = vround(y * 1.44269504088896341f);
    const vf r = (y - *n * 0.693145751953125f) - *n * 1.428606765330187e-06f;
    vf p = r * (1.0f / 5040) + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    return (p * r) * r + r;
}

/* e^y = 2^n e^r for |y| ≤ 88. */
static inline vf vexp(vf y) {
    vf n;
    const vf q = expm1_reduced(y, &n);
    return vscale2(q + 1.0f, n);
}

/* tanh x = sign(x) min(1, a P(a²) / Q(a²)) with a = min(|x|, 9) (tanh 9 rounds to 1 in float32): a rational
 * approximation of degree 6 / 3 in a², its relative error 6.6e-9 on [0, 9] (coefficients fitted to the
 * minimax of the relative error by `benchmarks/fit_tanh.py`, which prints them and this function's float32
 * error).  In float32 the rounding of the two Horner evaluations dominates: at most 5.0 ulp over a dense grid
 * (2.5 float32 eps relative, near |tanh x| = 1), 0.8 ulp on average, where the former e^{2|x|}-based form
 * E / (E + 2) reached 1.5 ulp — measured, that form's range reduction, 2^n scalings and second exponential
 * made each LSTM forward pass about 20 % slower (its two tanh per unit and day).  The min with 1 keeps
 * |tanh| ≤ 1 (the rounding could exceed it by 2 ulp), so 1 − tanh² never turns negative. */
static inline vf vtanh(vf x) {
    const vf a = vmin(vabs(x), splat(9.0f)), s = a * a;
    vf p = vfma(s, splat(-8.488516286e-14f), splat(5.277881257e-11f));
    p = vfma(s, p, splat(-2.022510337e-08f));
    p = vfma(s, p, splat(1.115428222e-05f));
    p = vfma(s, p, splat(3.103953786e-03f));
    p = vfma(s, p, splat(1.308400780e-01f));
    p = vfma(s, p, splat(1.0f));
    vf q = vfma(s, splat(2.546141623e-04f), splat(2.449516952e-02f));
    q = vfma(s, q, splat(4.641733468e-01f));
    q = vfma(s, q, splat(1.0f));
    const vf t = vmin(a * p * vrecip(q), splat(1.0f));
    return (vf)((vi)t | ((vi)x & ((vi){0} + (int)0x80000000))); /* t ≥ 0: the sign bit of x */
}

/* σ(x) = 1/(1 + e^{−x}), x clamped to ±80 (σ(80) rounds to 1; σ(−80) ≈ 2e-35, still a normal float). */
static inline vf vsigmoid(vf x) { return vrecip(1.0f + vexp(-vmax(vmin(x, splat(80.0f)), splat(-80.0f)))); }

typedef struct { vf v[H]; } units_t;

/* The forward passes' W_hh products read the weights gate by gate and column by column: wt[(g H + v) H + q] =
 * W_hh[g H + q][v] for the `gates` blocks of H rows (w: (gates · H, H)), so that the H weights of one column
 * are contiguous and the product's unrolled loop addresses them from one pointer (reading w[q · H + v] made
 * the compiler keep one pointer per row and reload them from the stack: measured, the LSTM forward pass
 * about 10 % slower).  The products' order of operations is unchanged. */
static void transpose_weights(float *wt, const float *w, int gates) {
    for (int g = 0; g < gates; g++)
        for (int v = 0; v < H; v++)
            for (int q = 0; q < H; q++) wt[(g * H + v) * H + q] = w[(g * H + q) * H + v];
}

/* Accumulators a product keeps in registers at once: all H where the register file holds them (AVX-512's 32
 * registers), else blocks of 10 (AVX2's 16 registers: H = 20 accumulators, the state and a broadcast spilled).
 * Each sum adds its terms in the same order either way, so the results are the same bit for bit.  Measured on
 * the AVX2 EPYC (bench_engine.py --backends --networks rnn lstm --repeats 3, idle, twice each), party-steps/s
 * at K = 10 / 50 blocked against not: the RNN EIIE 1,844–2,021 / 1,846–1,865 against 1,719–1,757 / 1,788–1,799,
 * the LSTM EIIE 376–439 / 446 against 303–309 / 344–411. */
#if TILE == 16
#define UB H
#else
#define UB (H < 10 ? H : 10)
#endif

/* acc[u] += Σ_{v < terms} m[v · H + u] · x[v] for the n ≤ UB entries u of one block (m: rows of H weights from
 * the block's first column, as wt; x: `terms` vectors), the v terms added in order: the W_hh products, UB
 * accumulators at a time. */
static inline __attribute__((always_inline)) void product_block(vf *acc, const float *m, const vf *x, const int terms,
                                                               const int n) {
    vf a[UB];
    UNROLL
    for (int u = 0; u < n; u++) a[u] = acc[u];
    for (int v = 0; v < terms; v++) {
        const vf xv = x[v];
        const float *column = m + v * H;
        UNROLL
        for (int u = 0; u < n; u++) a[u] += column[u] * xv;
    }
    UNROLL
    for (int u = 0; u < n; u++) acc[u] = a[u];
}

/* A_j of one tile: b + W_ih x_j for the gate rows u0 … u0 + count − 1 (x: the party's (F, L, R) inputs). */
#define PROJECT(z, count, u0, x, w_ih, b, F, at, drow, n)                                                       \
    for (int q = 0; q < (count); q++) {                                                                      \
        z[q] = splat((b)[(u0) + q]);                                                                         \
        for (int f = 0; f < (F); f++) z[q] += (w_ih)[((u0) + q) * (F) + f] * load((x) + f * (drow) + (at), n); \
    }

/* The saved state of the forward pass is tile-major: per party, tile and day one record of S vectors
 * of TILE lanes (Elman: h_j, S = H; LSTM: σ(i) σ(f) tanh(g) σ(o), S = 4H), so that a
 * tile-day reads and writes one contiguous block instead of S rows megabytes apart.  The lanes past
 * R of the last tile hold the recurrence of zero inputs and receive zero gradients. */
static inline vf *record(float *states, int k, int tiles, int t, int L, int j, int S) {
    return (vf *)(states + ((((long)k * tiles + t) * L + j) * S) * TILE);
}

/* Elman forward.  x: (K, F, L, R) inputs, w_ih: (K, H, F), bias: (K, H) = b_ih + b_hh, w_hh: (K, H, H);
 * states: (K, tiles, L, H, TILE), 64-byte aligned ← h_1 … h_L; h_last: (K, H, R) ← h_L. */
static int rnn_forward_range(int k0, int k1, int L, int R, int F, const float *x, const float *w_ih, const float *bias,
                 const float *w_hh, float *states, float *h_last) {
    const long drow = (long)L * R;
    const int tiles = (R + TILE - 1) / TILE;
    for (int k = k0; k < k1; k++) {
        const float *w = w_hh + (long)k * H * H, *wi = w_ih + (long)k * H * F, *b = bias + (long)k * H;
        const float *xk = x + (long)k * F * drow;
        float wt[H * H] __attribute__((aligned(64)));
        transpose_weights(wt, w, 1);
        for (int t = 0; t < tiles; t++) {
            const int r0 = t * TILE, n = R - r0 < TILE ? R - r0 : TILE;
            units_t h;
            UNROLL
            for (int u = 0; u < H; u++) h.v[u] = splat(0.0f);
            for (int j = 0; j < L; j++) {
                vf z[H]; /* the accumulators: registers */
                PROJECT(z, H, 0, xk, wi, b, F, (long)j * R + r0, drow, n)
                UNROLL
                for (int u0 = 0; u0 < H; u0 += UB) product_block(z + u0, wt + u0, h.v, H, H - u0 < UB ? H - u0 : UB);
                vf *out = record(states, k, tiles, t, L, j, H);
                UNROLL
                for (int u = 0; u < H; u++) vstream(out + u, h.v[u] = vtanh(z[u]));
            }
            for (int u = 0; u < H; u++) store(h_last + ((long)k * H + u) * R + r0, h.v[u], n);
        }
    }
    vstream_end();
    return 0;
}

/* The weight gradients, summed as the backward pass goes: with the day's inputs in_j = [1, x_j, h_{j−1}]
 * (1 + F + H vectors), G[q][c] = Σ_j δ_j[q] · in_j[c] holds ∂b (c = 0), ∂W_ih (c = 1 … F) and ∂W_hh
 * (c = 1 + F …) of every gate unit q, so no δ_j goes to the engine's memory.  A tile's δ_j and in_j
 * stay in two small buffers (L2) until its last day; then one register-blocked product (4 × 4 blocks of
 * G, the days the inner loop) adds the tile's G into the party's totals, lane by lane.  Round-off: each
 * lane sums one tile's l days, then the tiles; the lanes are added in double at the end. */
typedef struct {
    int count, width, days; /* gate units, 1 + F + H, l */
    vf *d, *in, *total;     /* (l, count), (l, width), (count, width) */
} sums_t;

static int sums_init(sums_t *s, int count, int F, int L) {
    s->count = count;
    s->width = 1 + F + H;
    s->days = L;
    const size_t vectors = (size_t)L * count + (size_t)L * s->width + (size_t)count * s->width;
    s->d = aligned_alloc(sizeof(vf), vectors * sizeof(vf));
    if (s->d == NULL) return -1;
    s->in = s->d + (size_t)L * count;
    s->total = s->in + (size_t)L * s->width;
    memset(s->total, 0, (size_t)count * s->width * sizeof(vf));
    return 0;
}

/* total += Σ_j d_jᵀ in_j of the tile just finished (the module's one product per tile). */
static void sums_end_tile(sums_t *s) { outer_sums(s->total, s->d, s->in, s->count, s->width, s->days); }

/* Writes ∂b (count), ∂W_ih (count, F), ∂W_hh (count, H) of one party, then frees the buffers. */
static void sums_write(sums_t *s, int F, float *grad_bias, float *grad_w_ih, float *grad_w_hh) {
    for (int q = 0; q < s->count; q++)
        for (int c = 0; c < s->width; c++) {
            const float total = lanes_sum(s->total[(size_t)q * s->width + c]);
            if (c == 0)
                grad_bias[q] = total;
            else if (c <= F)
                grad_w_ih[q * F + c - 1] = total;
            else
                grad_w_hh[q * H + c - 1 - F] = total;
        }
    free(s->d);
}

/* The day's inputs [1, x_j, h_{j−1}] of one tile (x at day offset `at`, h_{j−1} given). */
static inline void day_inputs(vf *in, const float *x, int F, long drow, long at, int n, const vf *h_prev) {
    in[0] = splat(1.0f);
    for (int f = 0; f < F; f++) in[1 + f] = load(x + f * drow + at, n);
    UNROLL
    for (int v = 0; v < H; v++) in[1 + F + v] = h_prev[v];
}

/* Elman backward.  x, w_hh, states: as the forward's; grad_h: (K, H, R) = ∂h_L; grad_bias: (K, H) ← Σ δ;
 * grad_w_ih: (K, H, F) ← Σ δ xᵀ; grad_w_hh: (K, H, H) ← Σ δ_j h_{j−1}ᵀ.  Returns 0, or −1 when out of memory. */
static int rnn_backward_range(int k0, int k1, int L, int R, int F, const float *x, const float *w_hh, float *states,
                 const float *grad_h, float *grad_bias, float *grad_w_ih, float *grad_w_hh) {
    const long drow = (long)L * R;
    const int tiles = (R + TILE - 1) / TILE;
    for (int k = k0; k < k1; k++) {
        const float *w = w_hh + (long)k * H * H, *xk = x + (long)k * F * drow;
        sums_t sums;
        if (sums_init(&sums, H, F, L) != 0) return -1;
        for (int t = 0; t < tiles; t++) {
            const int r0 = t * TILE, n = R - r0 < TILE ? R - r0 : TILE;
            vf dh[H]; /* the accumulators: registers */
            UNROLL
            for (int u = 0; u < H; u++) dh[u] = load(grad_h + ((long)k * H + u) * R + r0, n);
            for (int j = L - 1; j >= 0; j--) { /* day j + 1 of the module doc */
                const vf *h = record(states, k, tiles, t, L, j, H);
                vf *d = sums.d + (size_t)j * H;
                UNROLL
                for (int u = 0; u < H; u++) d[u] = dh[u] - dh[u] * h[u] * h[u];
                units_t h_prev;
                if (j > 0) {
                    const vf *previous = record(states, k, tiles, t, L, j - 1, H);
                    UNROLL
                    for (int u = 0; u < H; u++) h_prev.v[u] = previous[u];
                } else {
                    UNROLL
                    for (int u = 0; u < H; u++) h_prev.v[u] = splat(0.0f);
                }
                day_inputs(sums.in + (size_t)j * sums.width, xk, F, drow, (long)j * R + r0, n, h_prev.v);
                if (j == 0) break;
                UNROLL
                for (int v = 0; v < H; v++) dh[v] = splat(0.0f);
                UNROLL
                for (int v0 = 0; v0 < H; v0 += UB) product_block(dh + v0, w + v0, d, H, H - v0 < UB ? H - v0 : UB);
            }
            sums_end_tile(&sums);
        }
        sums_write(&sums, F, grad_bias + (long)k * H, grad_w_ih + (long)k * H * F, grad_w_hh + (long)k * H * H);
    }
    return 0;
}

/* The LSTM record: the activated gates i f g o (4H vectors).  c_j and tanh c_j are not saved: the backward
 * pass recomputes them tile by tile (one multiply-add and one tanh per unit and day, with the forward
 * pass's own functions, so the values are the forward pass's bit for bit) into a buffer that stays in
 * the cache, and h_{j−1} = o_{j−1} tanh c_{j−1}.  The records are read back from memory, so their size
 * is the backward pass's time: 4H instead of the 7H of i f g o c_j tanh c_j h_j, measured 1.31 → 1.05 ms
 * per party-step. */
#define LSTM_S (4 * H)

/* c_j = f ⊙ c_{j−1} + i ⊙ g: the one expression of the cell state, for the forward pass and its recomputation. */
static inline vf lstm_cell(vf c, vf i, vf f, vf g) { return vfma(f, c, i * g); }

/* LSTM forward.  x: (K, F, L, R), w_ih: (K, 4H, F), bias: (K, 4H), w_hh: (K, 4H, H);
 * states: (K, tiles, L, 4H, TILE), 64-byte aligned ← the records of days 1 … L; h_last: (K, H, R) ← h_L.
 * Each day of a tile runs in two phases: the 4H pre-activations z = A_j + W_hh h_{j−1} (one gate's H rows
 * at a time, a block of compile-time size, so that its H accumulators are registers), then the cell's
 * element-wise update unit by unit, the record streamed to memory. */
static int lstm_forward_range(int k0, int k1, int L, int R, int F, const float *x, const float *w_ih, const float *bias,
                  const float *w_hh, float *states, float *h_last) {
    const long drow = (long)L * R;
    const int tiles = (R + TILE - 1) / TILE;
    for (int k = k0; k < k1; k++) {
        const float *w = w_hh + (long)k * 4 * H * H, *wi = w_ih + (long)k * 4 * H * F, *bk = bias + (long)k * 4 * H;
        const float *xk = x + (long)k * F * drow;
        float wt[4 * H * H] __attribute__((aligned(64)));
        transpose_weights(wt, w, 4);
        for (int t = 0; t < tiles; t++) {
            const int r0 = t * TILE, n = R - r0 < TILE ? R - r0 : TILE;
            units_t h, c;
            for (int u = 0; u < H; u++) h.v[u] = c.v[u] = splat(0.0f);
            for (int j = 0; j < L; j++) {
                const long at = (long)j * R + r0;
                vf z[4 * H];
                for (int q0 = 0; q0 < 4 * H; q0 += H) {
                    vf *acc = z + q0;
                    PROJECT(acc, H, q0, xk, wi, bk, F, at, drow, n)
                    UNROLL
                    for (int u0 = 0; u0 < H; u0 += UB)
                        product_block(acc + u0, wt + q0 * H + u0, h.v, H, H - u0 < UB ? H - u0 : UB);
                }
                vf *rec = record(states, k, tiles, t, L, j, LSTM_S);
                for (int u = 0; u < H; u++) {
                    const vf i = vsigmoid(z[u]), f = vsigmoid(z[H + u]), g = vtanh(z[2 * H + u]);
                    const vf o = vsigmoid(z[3 * H + u]);
                    c.v[u] = lstm_cell(c.v[u], i, f, g);
                    h.v[u] = o * vtanh(c.v[u]);
                    vstream(rec + u, i), vstream(rec + H + u, f), vstream(rec + 2 * H + u, g), vstream(rec + 3 * H + u, o);
                }
            }
            for (int u = 0; u < H; u++) store(h_last + ((long)k * H + u) * R + r0, h.v[u], n);
        }
    }
    vstream_end();
    return 0;
}

/* One day of the cell states' recomputation: c_{j+1} of a tile into cell (day j + 1) from c_j (day j). */
static inline void cell_day(vf *cell, const vf *rec, int j) {
    const vf *before = cell + j * H;
    vf *now = cell + (j + 1) * H;
    UNROLL
    for (int u = 0; u < H; u++) now[u] = lstm_cell(before[u], rec[u], rec[H + u], rec[2 * H + u]);
}

/* LSTM backward.  x, w_hh, states: as the forward's; grad_h: (K, H, R) = ∂h_L; grad_bias: (K, 4H) ← Σ δ;
 * grad_w_ih: (K, 4H, F) ← Σ δ xᵀ; grad_w_hh: (K, 4H, H) ← Σ δ_j h_{j−1}ᵀ (gate order i f g o).
 * Each tile first recomputes its cell states in a pass of its own, which streams the tile's records into
 * the cache (recomputing them day by day under the next tile's backward pass instead was slower: 1.19 ms
 * against 1.13 per party-step, measured).  Returns 0, or −1 when out of memory. */
static int lstm_backward_range(int k0, int k1, int L, int R, int F, const float *x, const float *w_hh, float *states,
                  const float *grad_h, float *grad_bias, float *grad_w_ih, float *grad_w_hh) {
    const long drow = (long)L * R;
    const int tiles = (R + TILE - 1) / TILE;
    /* cell: (L + 1, H) vectors, day j holding c_j of the current tile; day 0 is c_0 = 0 */
    vf *cell = aligned_alloc(sizeof(vf), (size_t)(L + 1) * H * sizeof(vf));
    if (cell == NULL) return -1;
    for (int u = 0; u < H; u++) cell[u] = splat(0.0f);
    for (int k = k0; k < k1; k++) {
        const float *w = w_hh + (long)k * 4 * H * H, *xk = x + (long)k * F * drow;
        sums_t sums;
        if (sums_init(&sums, 4 * H, F, L) != 0) {
            free(cell);
            return -1;
        }
        for (int t = 0; t < tiles; t++) {
            const int r0 = t * TILE, n = R - r0 < TILE ? R - r0 : TILE;
            for (int j = 0; j < L; j++) cell_day(cell, record(states, k, tiles, t, L, j, LSTM_S), j);
            units_t tc; /* tanh c_j of the day below, computed on the day after it */
            UNROLL
            for (int u = 0; u < H; u++) tc.v[u] = vtanh(cell[L * H + u]);
            vf dh[H]; /* the accumulators: registers */
            units_t dc;
            UNROLL
            for (int u = 0; u < H; u++) dh[u] = load(grad_h + ((long)k * H + u) * R + r0, n);
            for (int u = 0; u < H; u++) dc.v[u] = splat(0.0f);
            for (int j = L - 1; j >= 0; j--) { /* day j + 1 of the module doc */
                const vf *rec = record(states, k, tiles, t, L, j, LSTM_S);
                const vf *c_prev = cell + j * H;
                vf *d = sums.d + (size_t)j * 4 * H;
                UNROLL
                for (int u = 0; u < H; u++) {
                    const vf i = rec[u], f = rec[H + u], g = rec[2 * H + u], o = rec[3 * H + u];
                    const vf dcu = dc.v[u] + dh[u] * o * (1.0f - tc.v[u] * tc.v[u]);
                    d[u] = dcu * g * i * (1.0f - i);
                    d[H + u] = dcu * c_prev[u] * f * (1.0f - f);
                    d[2 * H + u] = dcu * i * (1.0f - g * g);
                    d[3 * H + u] = dh[u] * tc.v[u] * o * (1.0f - o);
                    dc.v[u] = dcu * f;
                }
                units_t h_prev; /* h_{j−1} = o_{j−1} tanh c_{j−1}, 0 on the first day */
                if (j > 0) {
                    const vf *o_prev = record(states, k, tiles, t, L, j - 1, LSTM_S) + 3 * H;
                    UNROLL
                    for (int u = 0; u < H; u++) h_prev.v[u] = o_prev[u] * (tc.v[u] = vtanh(c_prev[u]));
                } else {
                    UNROLL
                    for (int u = 0; u < H; u++) h_prev.v[u] = splat(0.0f);
                }
                day_inputs(sums.in + (size_t)j * sums.width, xk, F, drow, (long)j * R + r0, n, h_prev.v);
                if (j == 0) break;
                UNROLL
                for (int v = 0; v < H; v++) dh[v] = splat(0.0f);
                UNROLL
                for (int v0 = 0; v0 < H; v0 += UB) product_block(dh + v0, w + v0, d, 4 * H, H - v0 < UB ? H - v0 : UB);
            }
            sums_end_tile(&sums);
        }
        sums_write(&sums, F, grad_bias + (long)k * 4 * H, grad_w_ih + (long)k * 4 * H * F,
                   grad_w_hh + (long)k * 4 * H * H);
    }
    free(cell);
    return 0;
}

/* The entry points: the day loops of `cell` (0: Elman, 1: LSTM) for parties k0 … k1 − 1 on `threads` threads
 * (vectors.h); the arguments after F are the cell's forward or backward pass's, above.  The backward pass
 * returns 0, or −1 when out of memory. */
void recurrence_forward(int threads, int k0, int k1, int cell, int L, int R, int F, const float *x, const float *w_ih,
                        const float *bias, const float *w_hh, float *states, float *h_last) {
    int status = 0;
    OVER_PARTIES(cell ? lstm_forward_range(lo, hi, L, R, F, x, w_ih, bias, w_hh, states, h_last)
                      : rnn_forward_range(lo, hi, L, R, F, x, w_ih, bias, w_hh, states, h_last))
    (void)status;
}

int recurrence_backward(int threads, int k0, int k1, int cell, int L, int R, int F, const float *x, const float *w_hh,
                        float *states, const float *grad_h, float *grad_bias, float *grad_w_ih, float *grad_w_hh) {
    int status = 0;
    OVER_PARTIES(cell ? lstm_backward_range(lo, hi, L, R, F, x, w_hh, states, grad_h, grad_bias, grad_w_ih, grad_w_hh)
                      : rnn_backward_range(lo, hi, L, R, F, x, w_hh, states, grad_h, grad_bias, grad_w_ih, grad_w_hh))
    return status;
}

static int head_range(int k0, int k1, int B, int M, double commission, const float *h_last, const float *head,
                      const float *previous, const float *y_now, const float *y_next, const unsigned char *padded,
                      float *weights, float *rewards, float *grad_h, float *grad_head) {
    const long R = (long)B * M, days = (long)B * (M + 1);
    for (int k = k0; k < k1; k++)
        head_party(B, M, commission, h_last + k * H * R, 1, R, head + (long)k * (H + 3), previous + k * days,
                   y_now + k * days, y_next + k * days, padded == NULL ? NULL : padded + (long)k * M, weights + k * days,
                   rewards + (long)k * B, grad_h + k * H * R, grad_head + (long)k * (H + 3));
    return 0;
}

/* The direct learner's head and reward on the last hidden states, with their gradient (head.h), between the
 * forward and the backward pass.  h_last: (K, H, R) the forward pass's, R = B·M sequences; head: (K, H + 3);
 * previous, y_now, y_next: (K, B, M + 1); padded: (K, M) or NULL; weights ← (K, B, M + 1); rewards ← (K, B);
 * grad_h ← (K, H, R), the backward pass's ∂h_l; grad_head ← (K, H + 3). */
void recurrence_head(int threads, int k0, int k1, int B, int M, double commission, const float *h_last,
                     const float *head, const float *previous, const float *y_now, const float *y_next,
                     const unsigned char *padded, float *weights, float *rewards, float *grad_h, float *grad_head) {
    int status = 0;
    OVER_PARTIES(head_range(lo, hi, B, M, commission, h_last, head, previous, y_now, y_next, padded, weights, rewards,
                            grad_h, grad_head))
    (void)status;
}

/* Sequences per tile (the lanes of a record), read by portfed/agents/native.py to size the records, and
 * whether the entry points split their parties over OpenMP threads (vectors.h). */
int tile_width(void) { return TILE; }
int openmp(void) { return OPENMP; }
