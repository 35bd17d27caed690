/* The EIIE head and the DPG reward of one party, forward and backward in one pass: the middle of the direct
 * learner's step without autograd (convolution.c's cnn_step, recurrence.c's recurrence_head;
 * portfed/agents/batched_head.py, BatchedEIIE.reward_gradient).
 * For batch day b, assets i = 1 … M (cash i = 0), maps h_i (MAPS numbers each) and the head's parameters
 * a (MAPS + 1 numbers), b, s_0:
 *
 *   s_i = a · [h_i, w_{t−1,i}] + b,  s_0 the cash bias,  w_t = softmax(s)       (Jiang, Xu & Liang 2017, Fig. 2)
 *   w'_t = (y_t ⊙ w_{t−1}) / (y_t · w_{t−1}),  μ_t = 1 − c Σ_{i≥1} |w'_{t,i} − w_{t,i}|
 *   r_t = ln(μ_t · y_{t+1} · w_t),  L = −(1/B) Σ_b r_t                  (Jiang eq. 22, linear μ; objective.py)
 *
 * and its gradient, written out:
 *
 *   ∂L/∂w_i = −(1/B) (y_{t+1,i} / (y_{t+1} · w_t) + c sgn(w'_i − w_i) / μ_t)    (the second term for i ≥ 1 only)
 *   ∂L/∂s_i = w_i (∂L/∂w_i − Σ_j w_j ∂L/∂w_j)                                  (the softmax's Jacobian)
 *   ∂L/∂h_i = ∂L/∂s_i a_{1…MAPS},  ∂L/∂a = Σ_{b,i} ∂L/∂s_i [h_i, w_{t−1,i}],  ∂L/∂b = Σ_{b,i} ∂L/∂s_i,
 *   ∂L/∂s_0 = Σ_b ∂L/∂s_0.
 *
 * sgn(0) = 0, as PyTorch's |x| backward.  A padded asset (pad[i − 1] ≠ 0: the party's universe has fewer
 * than M assets) scores −∞: weight 0, no reward, no gradient (batched_head.py).
 *
 * Precision: the scores in float32 (their rounding perturbs the inputs of what follows, it is not
 * amplified), everything after them in double, rounded to float32 on the way out.  The softmax's Jacobian
 * subtracts two nearly equal numbers (∂L/∂w_i and Σ_j w_j ∂L/∂w_j differ by about the spread of the day's
 * price relatives, a fiftieth of either), which in float32 costs some six bits: on the cases of
 * tests/test_native.py PyTorch's float32 autograd of the same expressions is 2–6e-8 off the float64
 * gradient of the head's parameters, this pass 3–6e-11. */
#ifndef PORTFED_HEAD_H
#define PORTFED_HEAD_H
#include <math.h>

#ifndef MAPS
#error "define MAPS (the maps per asset) before including head.h"
#endif

/* One party: maps: B·M rows of MAPS numbers, row r's map d at maps[r·row_stride + d·map_stride] (the CNN's
 * (B·M, MAPS) rows: MAPS, 1; the recurrence's (MAPS, B·M) last states: 1, B·M); head (MAPS + 3) = a, b, s_0;
 * previous, y_now, y_next (B, M + 1), cash first; pad (M) or NULL; weights ← (B, M + 1); rewards ← (B);
 * grad_maps ← the maps' gradient in their layout; grad_head ← (MAPS + 3). */
static void head_party(int B, int M, double commission, const float *maps, long row_stride, long map_stride,
                       const float *head, const float *previous, const float *y_now, const float *y_next,
                       const unsigned char *pad, float *weights, float *rewards, float *grad_maps, float *grad_head) {
    const double c = commission, scale = -1.0 / B;
    const double a_previous = head[MAPS], bias = head[MAPS + 1], cash = head[MAPS + 2];
    double s[M + 1], w[M + 1], g[M + 1], sum_a[MAPS + 1], sum_bias = 0.0, sum_cash = 0.0;
    for (int d = 0; d <= MAPS; d++) sum_a[d] = 0.0;
    for (int b = 0; b < B; b++) {
        const float *h = maps + (long)b * M * row_stride, *p = previous + (long)b * (M + 1),
                    *yn = y_now + (long)b * (M + 1), *yx = y_next + (long)b * (M + 1);
        float *gh = grad_maps + (long)b * M * row_stride, *out = weights + (long)b * (M + 1);
        double top = cash;
        s[0] = cash;
        for (int i = 1; i <= M; i++) {
            if (pad != NULL && pad[i - 1]) continue;
            const float *hi = h + (i - 1) * row_stride;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int d = 0; d < MAPS; d++) dot += head[d] * hi[d * map_stride];
            const double acc = bias + a_previous * p[i] + dot;
            s[i] = acc;
            top = acc > top ? acc : top;
        }
        double total = 0.0;
        for (int i = 0; i <= M; i++) {
            w[i] = (i > 0 && pad != NULL && pad[i - 1]) ? 0.0 : exp(s[i] - top);
            total += w[i];
        }
        double held = 0.0, gain = 0.0;
        for (int i = 0; i <= M; i++) {
            w[i] /= total;
            out[i] = (float)w[i];
            held += (double)yn[i] * p[i];
            gain += yx[i] * w[i];
        }
        double cost = 0.0;
        for (int i = 1; i <= M; i++) {
            const double gap = (double)yn[i] * p[i] / held - w[i]; /* w'_i − w_i */
            g[i] = (gap > 0) - (gap < 0);
            cost += fabs(gap);
        }
        const double mu = 1.0 - c * cost;
        rewards[b] = (float)log(mu * gain);
        g[0] = scale * (yx[0] / gain);
        double dot = w[0] * g[0];
        for (int i = 1; i <= M; i++) {
            g[i] = scale * (yx[i] / gain + c * g[i] / mu);
            dot += w[i] * g[i];
        }
        sum_cash += w[0] * (g[0] - dot);
        for (int i = 1; i <= M; i++) {
            const float *hi = h + (i - 1) * row_stride;
            float *ghi = gh + (i - 1) * row_stride;
            const double ds = w[i] * (g[i] - dot); /* 0 for a padded asset (w_i = 0) */
            for (int d = 0; d < MAPS; d++) {
                ghi[d * map_stride] = (float)(ds * head[d]);
                sum_a[d] += ds * hi[d * map_stride];
            }
            sum_a[MAPS] += ds * p[i];
            sum_bias += ds;
        }
    }
    for (int d = 0; d <= MAPS; d++) grad_head[d] = (float)sum_a[d];
    grad_head[MAPS + 1] = (float)sum_bias;
    grad_head[MAPS + 2] = (float)sum_cash;
}

#endif
