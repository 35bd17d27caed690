/* The subnormal flush of the C kernels on AArch64 (vectors.h: FPCR's FZ bit), checked on an x86 machine by
 * cross-compiling and emulating — the same check as tests/test_native.py's x86 one, which runs natively on an
 * ARM machine with a C compiler:
 *
 *   pip install ziglang            # a clang with every target (any environment; not a portfed dependency)
 *   apt-get install qemu-user-static
 *   python -m ziglang cc -target aarch64-linux-musl -O3 -DHIDDEN=4 -Iportfed/agents portfed/agents/recurrence.c \
 *       benchmarks/arm_flush_check.c -lm -static -o /tmp/arm_flush_check
 *   qemu-aarch64-static /tmp/arm_flush_check   # exit status 0: flushed inside, restored after
 *
 * The kernel's Elman forward pass with W_ih = 1, W_hh = 0, b = 0 gives h_1 = tanh(x) ≈ x: a subnormal x is read
 * as 0 inside the kernel, a normal one passes; after the call the caller's FPCR is as it was and computes
 * subnormals again.  Measured 2026-11-28 (zig 0.17 clang, qemu 7.2): 0 wrong lanes with the FZ bit, 18 of 36
 * (every subnormal lane) with vectors.h before it. */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>

void recurrence_forward(int threads, int k0, int k1, int cell, int L, int R, int F, const float *x, const float *w_ih,
                        const float *bias, const float *w_hh, float *states, float *h_last);

int main(void) {
    enum { H = 4, R = 36 };
    const float tiny = FLT_MIN; /* 2^−126, the smallest normal float */
    const float values[6] = {tiny / 4, -tiny / 64, 1e-45f, tiny, 4 * tiny, 1e-30f}; /* three subnormal, three not */
    float x[R], w_ih[H] = {1, 1, 1, 1}, bias[H] = {0}, w_hh[H * H] = {0}, h_last[H * R];
    for (int i = 0; i < R; i++)
        x[i] = values[i % 6];
    float *states = aligned_alloc(64, 4096); /* (K, tiles, days, H, 16 lanes): 1 × 3 × 1 × 4 × 16 floats */
    unsigned long long before, after;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(before));
    recurrence_forward(1, 0, 1, 0, 1, R, 1, x, w_ih, bias, w_hh, states, h_last);
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(after));
    int wrong = 0;
    for (int i = 0; i < R; i++) { /* unit 0 of sequence i: h_last is (H, R) */
        const int subnormal = i % 6 < 3;
        wrong += subnormal ? h_last[i] != 0.0f : h_last[i] != values[i % 6];
    }
    volatile float small = tiny, four = 4.0f;
    const float outside = small / four; /* subnormal again after the call */
    printf("FPCR before %#llx, after %#llx; wrong lanes %d of %d; FLT_MIN / 4 after the call %g\n", before, after, wrong,
           R, outside);
    free(states);
    return wrong || before != after || outside == 0.0f;
}
