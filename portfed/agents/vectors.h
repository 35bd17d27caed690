/* The vector helpers of portfed's C kernels (recurrence.c, convolution.c): TILE lanes of float32 — one
 * vector register of the CPU the library is compiled for — in GCC / Clang vector extensions, with single
 * AVX-512 instructions where the compiler targets them (-march=native on such a CPU) and a portable
 * fallback otherwise. */
#ifndef PORTFED_VECTORS_H
#define PORTFED_VECTORS_H
#include <stdlib.h>
#include <string.h>

/* Lanes per register tile: one 512-bit vector on AVX-512, else one 256-bit vector (AVX2's width; two
 * 128-bit registers on SSE or NEON).  The kernels keep a tile's state of H units (Elman) or 4H gates (LSTM)
 * in registers, so the tile must fit the register file: on an AVX2-only AMD EPYC (16 registers of 8 lanes)
 * 16-lane tiles spilled and ran at 0.31–0.67× the PyTorch operations' party-steps/s, 8-lane tiles at
 * 2–4× (benchmarks/bench_engine.py --backends, docs/reports/performance.md).  The library reports it
 * (tile_width), and the callers size the tile-major buffers from that. */
#if defined(__AVX512F__)
#define TILE 16
#else
#define TILE 8
#endif

/* Unroll the loops over units completely, so that their vectors are registers, not stack arrays. */
#if defined(__clang__)
#define UNROLL _Pragma("unroll")
#else
#define UNROLL _Pragma("GCC unroll 128")
#endif

typedef float vf __attribute__((vector_size(TILE * sizeof(float))));
typedef int vi __attribute__((vector_size(TILE * sizeof(int)))); /* lane masks: −1 true, 0 false */

static inline vf splat(float a) { return (vf){0} + a; }

/* The n ≤ TILE valid lanes at p (the last tile of a row may be partial; the other lanes read 0). */
static inline vf load(const float *p, int n) {
    vf v = {0};
    if (n == TILE)
        memcpy(&v, p, sizeof v); /* a constant size: one unaligned vector load */
    else
        memcpy(&v, p, (size_t)n * sizeof(float));
    return v;
}

static inline void store(float *p, vf v, int n) {
    if (n == TILE)
        memcpy(p, &v, sizeof v);
    else
        memcpy(p, &v, (size_t)n * sizeof(float));
}

/* The few operations that the portable vector code below would spell as several instructions, as single
 * AVX-512 instructions where the compiler targets them (-march=native on such a CPU), else portably:
 * min, max, |x|, rounding, x · 2^n for an integral n, 1/d (rcp14 + one Newton step: relative error ≤ 2^−28
 * before the last rounding, so within one float32 ulp of 1/d, as the division; no divider, whose
 * throughput is a tenth of a multiply-add's), a fused multiply-add.  Measured on the LSTM forward pass
 * with its records in cache: 1.23 → 1.02 ms per party-step (the transcendentals were two thirds of it). */
#if defined(__AVX512F__) && TILE == 16
#include <immintrin.h>
static inline vf vmin(vf a, vf b) { return (vf)_mm512_min_ps((__m512)a, (__m512)b); }
static inline vf vmax(vf a, vf b) { return (vf)_mm512_max_ps((__m512)a, (__m512)b); }
static inline vf vabs(vf a) { return (vf)_mm512_abs_ps((__m512)a); }
static inline vf vround(vf a) { return (vf)_mm512_roundscale_ps((__m512)a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vf vscale2(vf p, vf n) { return (vf)_mm512_scalef_ps((__m512)p, (__m512)n); }
static inline vf vrecip(vf d) {
    const vf r = (vf)_mm512_rcp14_ps((__m512)d);
    return r + r * (1.0f - d * r);
}
static inline vf vfma(vf a, vf b, vf c) { return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c); }
/* A store that bypasses the caches (p: 64-byte aligned): the forward records go to memory without each
 * line first being read into the cache (no read-for-ownership); measured: the LSTM forward pass 1.40 →
 * 1.08 ms per party-step. */
static inline void vstream(vf *p, vf v) { _mm512_stream_ps((float *)p, (__m512)v); }
static inline void vstream_end(void) { _mm_sfence(); }
/* The 16 × 16 transpose of r in registers (unpack, then 128-bit lane shuffles). */
static inline void transpose16(__m512 *r) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
}
/* columns[c] ← column c of the n ≤ TILE rows at p (stride floats apart, `width` columns; the lanes past n
 * read 0): the rows turned into lane vectors, 16 columns at a time.  Measured against 16-lane gathers
 * of the same columns: the CNN forward pass about 2 µs per party-step faster, of 20 (measured). */
static inline void vtranspose_rows(vf *columns, const float *p, int stride, int width, int n) {
    for (int c0 = 0; c0 < width; c0 += TILE) {
        const int count = width - c0 < TILE ? width - c0 : TILE;
        const __mmask16 mask = count == TILE ? (__mmask16)0xFFFF : (__mmask16)((1u << count) - 1u);
        __m512 r[TILE];
        for (int i = 0; i < TILE; i++)
            r[i] = i < n ? _mm512_maskz_loadu_ps(mask, p + (long)i * stride + c0) : _mm512_setzero_ps();
        transpose16(r);
        for (int c = 0; c < count; c++) columns[c0 + c] = (vf)r[c];
    }
}
/* The inverse: the n ≤ TILE rows at p (stride floats apart) ← their `width` columns, columns[c] the lane vector
 * of column c. */
static inline void vstore_rows(float *p, int stride, int width, int n, const vf *columns) {
    for (int c0 = 0; c0 < width; c0 += TILE) {
        const int count = width - c0 < TILE ? width - c0 : TILE;
        const __mmask16 mask = count == TILE ? (__mmask16)0xFFFF : (__mmask16)((1u << count) - 1u);
        __m512 r[TILE];
        for (int i = 0; i < TILE; i++) r[i] = i < count ? (__m512)columns[c0 + i] : _mm512_setzero_ps();
        transpose16(r);
        for (int i = 0; i < n && i < TILE; i++) _mm512_mask_storeu_ps(p + (long)i * stride + c0, mask, r[i]);
    }
}
#else
/* mask ? a : b, lane by lane (C has no vector ?:) */
static inline vf vselect(vi mask, vf a, vf b) { return (vf)(((vi)a & mask) | ((vi)b & ~mask)); }
static inline vf vmin(vf a, vf b) { return vselect(a < b, a, b); }
static inline vf vmax(vf a, vf b) { return vselect(a > b, a, b); }
static inline vf vabs(vf a) { return vmax(a, -a); }
static inline vf vround(vf a) { /* adding 1.5 · 2^23 rounds |a| < 2^22 to an integer */
    const vf shifter = (vf){0} + 12582912.0f;
    return (a + shifter) - shifter;
}
static inline vf vscale2(vf p, vf n) { return p * (vf)(((vi){0} + 127 + __builtin_convertvector(n, vi)) << 23); }
static inline vf vrecip(vf d) { return 1.0f / d; }
static inline vf vfma(vf a, vf b, vf c) { return a * b + c; }
static inline void vstream(vf *p, vf v) { *p = v; }
static inline void vstream_end(void) {}
static inline void vtranspose_rows(vf *columns, const float *p, int stride, int width, int n) {
    for (int c = 0; c < width; c++) {
        vf v = {0};
        for (int i = 0; i < n && i < TILE; i++) v[i] = p[(long)i * stride + c];
        columns[c] = v;
    }
}
static inline void vstore_rows(float *p, int stride, int width, int n, const vf *columns) {
    for (int c = 0; c < width; c++)
        for (int i = 0; i < n && i < TILE; i++) p[(long)i * stride + c] = columns[c][i];
}
#endif

/* The exported entry points take (threads, k0, k1, …) and run their parties k0 … k1 − 1 split over `threads`
 * threads of the OpenMP runtime when the library is built with -fopenmp: PyTorch's own runtime, which the
 * process has loaded (libgomp.so.1), so the kernels run on PyTorch's workers instead of competing with
 * them (its idle workers spin for a while after each of its operations).  Without OpenMP, on the calling
 * thread (portfed.agents.native then splits the parties over Python threads).  OVER_PARTIES(CALL) runs
 * CALL — an int expression of the range [lo, hi) — on every thread's share and ORs the results into a
 * variable `status`; the enclosing function names its thread count `threads` and its range k0, k1. */
/* Subnormal floats (|x| < 2^−126 ≈ 1.2e−38) are flushed to zero while CALL runs, on each thread that runs
 * it: the floating-point control register's flush bits are set (x86's FTZ and DAZ, ARM's FZ: below), and the
 * caller's register is restored afterwards, so nothing outside the kernels sees a change.  Why: a policy that has saturated — a
 * party gone to cash, the softmax's other shares e^−30 — backpropagates gradients that underflow, and every
 * operation on a subnormal operand takes a microcode assist of about a hundred cycles.  Measured: the
 * recurrent actor-critic's rounds from a 800-round local-training checkpoint (26 of 50 parties in cash)
 * took 14–16 s against 8–10 s with the flush, whose kernels' time fell from 12.1 to about 5.7 s, what a
 * federated run's parties (none in cash) take.  What it changes: a term below 1.2e−38 is 0, where float32
 * could not add it to any normal number anyway (and Adam's update of such a gradient is < 1e−30).  The bits
 * are set where the compiler targets x86 with SSE, and on 64-bit ARM (AArch64: Apple silicon, Graviton,
 * Ampere), whose FPCR has one bit, FZ (bit 24), for both: subnormal operands and results of the scalar and
 * Advanced SIMD (NEON, the vector extensions' code) float arithmetic are 0.  Elsewhere (32-bit ARM, POWER,
 * RISC-V) subnormals are computed exactly, as before: the same results, slower when they occur. */
#if defined(__SSE__)
#include <xmmintrin.h>
#define MXCSR_FTZ_DAZ 0x8040u
typedef unsigned int fp_control;
static inline fp_control flush_subnormals(void) {
    const fp_control previous = _mm_getcsr();
    _mm_setcsr(previous | MXCSR_FTZ_DAZ);
    return previous;
}
static inline void restore_subnormals(fp_control previous) { _mm_setcsr(previous); }
#elif defined(__aarch64__)
#define FPCR_FZ (1ull << 24)
typedef unsigned long long fp_control;
/* "memory": no load or store of the kernels' data moves across the switch (nor, then, the arithmetic on it) */
static inline fp_control flush_subnormals(void) {
    fp_control previous;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(previous) : : "memory");
    __asm__ __volatile__("msr fpcr, %0" : : "r"(previous | FPCR_FZ) : "memory");
    return previous;
}
static inline void restore_subnormals(fp_control previous) {
    __asm__ __volatile__("msr fpcr, %0" : : "r"(previous) : "memory");
}
#else
typedef unsigned int fp_control;
static inline fp_control flush_subnormals(void) { return 0; }
static inline void restore_subnormals(fp_control previous) { (void)previous; }
#endif

#ifdef _OPENMP
#include <omp.h>
#define OVER_PARTIES(CALL)                                                                        \
    _Pragma("omp parallel num_threads(threads) reduction(|: status)")                             \
    {                                                                                             \
        const int n_ = omp_get_num_threads(), t_ = omp_get_thread_num();                          \
        const int lo = k0 + (int)((long)(k1 - k0) * t_ / n_), hi = k0 + (int)((long)(k1 - k0) * (t_ + 1) / n_); \
        const fp_control csr_ = flush_subnormals();                                               \
        status |= (CALL);                                                                         \
        restore_subnormals(csr_);                                                                 \
    }
#define OPENMP 1
#else
#define OVER_PARTIES(CALL)                                                                        \
    {                                                                                             \
        const int lo = k0, hi = k1;                                                               \
        const fp_control csr_ = flush_subnormals();                                               \
        (void)threads;                                                                            \
        status |= (CALL);                                                                         \
        restore_subnormals(csr_);                                                                 \
    }
#define OPENMP 0
#endif

/* g where h > 0, else 0: the gradient through a ReLU whose output is h */
static inline vf vrelu_grad(vf g, vf h) { return (vf)((vi)g & (h > 0.0f)); }
static inline vf vrelu(vf x) { return vmax((vf){0}, x); } /* max(0, x): a NaN x stays NaN, as in PyTorch */

#define QB 4 /* rows of a product's register block */
#define CB 4 /* columns of a product's register block */

/* One qb × cb block (qb ≤ QB, cb ≤ CB; constants once inlined) of total (rows × cols vectors) += Σ_{t < n} a_tᵀ b_t:
 * its qb · cb sums in registers, t the inner loop, each sum's n terms added in order before it is added to out. */
static inline __attribute__((always_inline)) void outer_block(vf *out, const vf *a, const vf *b, int rows, int cols,
                                                             int n, const int qb, const int cb) {
    vf acc[QB][CB];
    UNROLL
    for (int i = 0; i < qb; i++)
        UNROLL
        for (int j = 0; j < cb; j++) acc[i][j] = splat(0.0f);
    for (int t = 0; t < n; t++) {
        const vf *at = a + (size_t)t * rows, *bt = b + (size_t)t * cols;
        UNROLL
        for (int i = 0; i < qb; i++)
            UNROLL
            for (int j = 0; j < cb; j++) acc[i][j] += at[i] * bt[j];
    }
    UNROLL
    for (int i = 0; i < qb; i++)
        UNROLL
        for (int j = 0; j < cb; j++) out[i * cols + j] += acc[i][j];
}

/* total (rows × cols vectors) += Σ_{t < n} a_tᵀ b_t with a_t = a + t·rows and b_t = b + t·cols, lane by lane:
 * one register-blocked product (QB × CB blocks of total in registers, t the inner loop; the last columns in
 * a QB-row block of their own width: one sum at a time, as before, made the LSTM backward pass about 6 %
 * slower, its 22 columns leaving two).  The kernels' weight gradients over days or tiles. */
static void outer_sums(vf *total, const vf *a, const vf *b, int rows, int cols, int n) {
    for (int r0 = 0; r0 < rows; r0 += QB)
        for (int c0 = 0; c0 < cols; c0 += CB) {
            vf *out = total + (size_t)r0 * cols + c0;
            const vf *ar = a + r0, *bc = b + c0;
            const int qb = rows - r0 < QB ? rows - r0 : QB, cb = cols - c0 < CB ? cols - c0 : CB;
            if (qb == QB && cb == CB)
                outer_block(out, ar, bc, rows, cols, n, QB, CB);
            else if (qb == QB && cb == 3)
                outer_block(out, ar, bc, rows, cols, n, QB, 3);
            else if (qb == QB && cb == 2)
                outer_block(out, ar, bc, rows, cols, n, QB, 2);
            else if (qb == QB)
                outer_block(out, ar, bc, rows, cols, n, QB, 1);
            else
                for (int i = 0; i < qb; i++)
                    for (int j = 0; j < cb; j++) outer_block(out + i * cols + j, ar + i, bc + j, rows, cols, n, 1, 1);
        }
}

/* The lanes of vector v added in double. */
static inline float lanes_sum(vf v) {
    double total = 0.0;
    for (int lane = 0; lane < TILE; lane++) total += v[lane];
    return (float)total;
}

#endif
