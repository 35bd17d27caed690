"""The risk limits' projection (:mod:`portfed.agents.limits`) in training: batched, in torch, with its gradient.

The training engine applies :func:`limit_actions` to the policy's portfolios ``v = μ_θ(s)`` where the
reward is computed, so the agent is trained on the portfolios it will trade: the direct learner's reward
``r_t = ln(μ_t y_{t+1} · x_t)`` and the actor-critic's ``Q(s, x)`` see ``x_t = P(v_t)``, and the PVM keeps
``x_t``.  The book ``h = w'_t`` is the previous portfolio drifted by ``y_t`` (training data, no gradient).

**The value** is the exact projection of :mod:`portfed.agents.limits`, computed row by row in float64 the
same way (the sum's root between sorted breakpoints; the turnover multiplier ``ν`` by bisection to float64
precision), vectorised over every row of the batch.

**The gradient** is the projection's Jacobian, which exists almost everywhere: the projection is piecewise
affine.  At the solution each coordinate is *fixed* — at a bound (0, or the cap ``u``), or, when the
turnover limit binds (``ν > 0``), at the kink ``x_i = h_i`` — or *free*: ``x_i = v_i − τ − ν s_i`` with
``s_i = sign(x_i − h_i)`` for an asset and ``s_0 = 0`` for cash.  With the active sets held, ``τ`` and ``ν``
are the affine functions of ``v`` that keep the constraints tight,

    ``n_F τ + S ν = Σ_F v_i − 1 + Σ_fixed x_i``,
    ``S τ + n_A ν = Σ_{F, i≥1} s_i (v_i − h_i) − δ_eff + Σ_{fixed, i≥1} |x_i − h_i|``

(``F`` the free coordinates, ``n_F = |F|``, ``n_A`` the free assets, ``S = Σ_F s_i``; the second equation
only when ``ν > 0``), and autograd differentiates ``x_F = v_F − τ − ν s_F`` through them.  The forward
value is the exact projection itself (the affine form agrees with it to round-off).  When the 2 × 2 system
is singular (no free cash and every free asset traded the same way) ``ν`` is held fixed and only the sum
constraint is kept tight; when every coordinate is fixed the gradient is 0.
"""

from __future__ import annotations

import torch

from portfed.agents.limits import RiskLimits

#: Bisection steps on ν (the interval [0, ~6] is below float64 resolution after 64 halvings).
_BISECTIONS = 64
#: How close to a bound or a kink a coordinate counts as fixed there.
_ACTIVE = 1e-10
#: Elements of the (rows, breakpoints, coordinates) array evaluated at once.
_CHUNK = 4_000_000


def _coordinates(tau: torch.Tensor, v: torch.Tensor, h: torch.Tensor, upper: torch.Tensor,
                 nu: torch.Tensor) -> torch.Tensor:
    """``x_i(τ) = clip(h_i + S_ν(v_i − τ − h_i), 0, u_i)`` for ``tau`` ``(R, T)`` and rows ``(R, n)``: ``(R, T, n)``."""
    a = v[:, None, :] - tau[:, :, None] - h[:, None, :]
    shrunk = torch.sign(a) * torch.relu(a.abs() - nu[:, None, :])
    return torch.minimum(torch.relu(h[:, None, :] + shrunk), upper[:, None, :])


def _solve_sum(v: torch.Tensor, h: torch.Tensor, upper: torch.Tensor, nu: torch.Tensor) -> torch.Tensor:
    """Rows ``x(τ)`` with ``Σ x = 1``, the root found exactly between sorted breakpoints (as in ``limits.py``)."""
    out = torch.empty_like(v)
    step = max(1, _CHUNK // (6 * v.shape[1] * v.shape[1]))
    for lo in range(0, v.shape[0], step):
        r = slice(lo, lo + step)
        vr, hr, ur, nr = v[r], h[r], upper[r], nu[r]
        breaks = torch.cat([vr - hr - nr, vr - hr + nr, vr - nr, vr + nr, vr - nr - ur, vr + nr - ur], dim=1)
        breaks = torch.sort(breaks, dim=1).values
        sums = _coordinates(breaks, vr, hr, ur, nr).sum(dim=2)  # non-increasing along the breakpoints
        k = ((sums >= 1.0).sum(dim=1, keepdim=True) - 1).clamp(0, breaks.shape[1] - 2)
        b0, b1 = breaks.gather(1, k), breaks.gather(1, k + 1)
        s0, s1 = sums.gather(1, k), sums.gather(1, k + 1)
        drop = s0 - s1
        tau = torch.where(drop > 0, b0 + (s0 - 1.0) * (b1 - b0) / torch.where(drop > 0, drop, 1.0), b0)
        x = _coordinates(tau, vr, hr, ur, nr)[:, 0]
        out[r] = x / x.sum(dim=1, keepdim=True)
    return out


def _turnover(x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    return (x[:, 1:] - h[:, 1:]).abs().sum(dim=1)


def project_rows(v: torch.Tensor, h: torch.Tensor, upper: torch.Tensor,
                 max_turnover: float | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The exact projections ``x`` of the rows ``v`` ``(R, n)`` (float64, no gradient), the multipliers ``ν``
    ``(R,)`` and the turnover budgets ``δ_eff`` ``(R,)`` (``+inf`` without a turnover limit)."""
    nu = torch.zeros_like(v)
    if max_turnover is None:
        infinite = torch.full((v.shape[0],), float("inf"), dtype=v.dtype, device=v.device)
        return _solve_sum(v, torch.zeros_like(v), upper, nu), nu[:, 1], infinite
    budget = torch.clamp(torch.relu(h[:, 1:] - upper[:, 1:]).sum(dim=1), min=max_turnover)
    x = _solve_sum(v, h, upper, nu)
    over = torch.nonzero(_turnover(x, h) > budget).flatten()
    multiplier = torch.zeros(v.shape[0], dtype=v.dtype, device=v.device)
    if over.numel():
        vo, ho, uo, bo = v[over], h[over], upper[over], budget[over]
        low = torch.zeros_like(bo)
        high = 2.0 * (vo.abs().amax(dim=1) + ho.abs().amax(dim=1) + 2.0)
        for _ in range(_BISECTIONS):
            middle = 0.5 * (low + high)
            nu_o = torch.zeros_like(vo)
            nu_o[:, 1:] = middle[:, None]
            feasible = _turnover(_solve_sum(vo, ho, uo, nu_o), ho) <= bo
            high = torch.where(feasible, middle, high)
            low = torch.where(feasible, low, middle)
        nu_o = torch.zeros_like(vo)
        nu_o[:, 1:] = high[:, None]
        x[over] = _solve_sum(vo, ho, uo, nu_o)
        multiplier[over] = high
    return x, multiplier, budget


def _differentiable(v: torch.Tensor, h: torch.Tensor, upper: torch.Tensor, x: torch.Tensor, nu: torch.Tensor,
                    budget: torch.Tensor) -> torch.Tensor:
    """``x`` with the gradient of the module docstring (``v`` carries the graph; the rest are constants)."""
    binding = nu > 0
    assets = torch.zeros_like(x, dtype=torch.bool)
    assets[:, 1:] = True
    kink = assets & binding[:, None] & ((x - h).abs() <= _ACTIVE)
    free = (x > _ACTIVE) & (x < upper - _ACTIVE) & ~kink
    sign = torch.where(assets & free, torch.sign(x - h), torch.zeros_like(x))
    fixed_sum = torch.where(free, 0.0, x).sum(dim=1)
    n_free = free.sum(dim=1).to(x.dtype)
    n_assets = (free & assets).sum(dim=1).to(x.dtype)
    s_total = sign.sum(dim=1)
    sum_rhs = torch.where(free, v, 0.0).sum(dim=1) - 1.0 + fixed_sum
    det = n_free * n_assets - s_total ** 2
    solve2 = binding & (det > 0.5)  # det is an integer
    turn_rhs = (sign * (v - h)).sum(dim=1) - torch.where(binding, budget, 0.0) \
        + torch.where(~free & assets, (x - h).abs(), 0.0).sum(dim=1)
    safe_det = torch.where(solve2, det, 1.0)
    tau2 = (n_assets * sum_rhs - s_total * turn_rhs) / safe_det
    nu2 = (n_free * turn_rhs - s_total * sum_rhs) / safe_det
    tau1 = (sum_rhs - nu * s_total) / torch.clamp(n_free, min=1.0)
    tau = torch.where(solve2, tau2, tau1)
    mult = torch.where(solve2, nu2, nu)
    affine = v - tau[:, None] - mult[:, None] * sign
    shaped = torch.where(free, affine, x)
    return shaped + (x - shaped).detach()  # the exact value forward, the affine map's Jacobian backward


def limit_actions(weights: torch.Tensor, previous: torch.Tensor, y_now: torch.Tensor, limits: RiskLimits,
                  padded: torch.Tensor | None = None) -> torch.Tensor:
    """The portfolios ``weights`` ``(..., m + 1)`` (cash first) projected onto ``limits`` from the books
    ``w' = drift(previous, y_now)``; padded assets (``padded`` ``(K, 1, m)``, True where a universe has no
    asset) stay at 0.  Differentiable in ``weights`` (module docstring); same dtype and device."""
    shape, dtype = weights.shape, weights.dtype
    with torch.no_grad():
        grown = (y_now * previous).to(torch.float64)
        held = (grown / grown.sum(dim=-1, keepdim=True)).reshape(-1, shape[-1])
        upper = torch.ones(shape, dtype=torch.float64, device=weights.device)
        if limits.max_weight is not None:
            upper[..., 1:] = limits.max_weight
        if padded is not None:
            upper[..., 1:] = upper[..., 1:].masked_fill(padded.expand(shape[:-1] + (shape[-1] - 1,)), 0.0)
        upper = upper.reshape(-1, shape[-1])
        v = weights.detach().to(torch.float64).reshape(-1, shape[-1])
        x, nu, budget = project_rows(v, held, upper, limits.max_turnover)
    out = _differentiable(weights.to(torch.float64).reshape(-1, shape[-1]), held, upper, x, nu, budget)
    return out.reshape(shape).to(dtype)
