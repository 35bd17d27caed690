"""Hyper-parameters of an EIIE agent trained by deterministic policy gradient.

Defaults are the Fed+ portfolio settings (paper 001 §9.2, DESIGN.md §2), which reuse Jiang, Xu &
Liang (2017): commission c = 0.2 %, window l = 30, batch 50, learning rate 5e-5, and the
online-stochastic-batch parameter β = 5e-5 of the reference implementation PGPortfolio.

Two learners (``docs/learners.md``): ``direct``, Jiang et al.'s gradient through the differentiable
reward (no critic, no discount), and ``actor_critic``, the deterministic actor-critic that paper 000
§8.2 cites — each party "updat[es] its RL agent using the deterministic policy gradient [Silver et
al., 2014]" on an MDP with "discount factor γ = 0.99" — in the deep form of Lillicrap et al. (2016)
(:mod:`portfed.agents.actor_critic`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from portfed.agents.limits import RiskLimits
from portfed.data.panel import FEATURE_ORDER, PRICE_FEATURES
from portfed.validation import check_number

NETWORKS: tuple[str, ...] = ("cnn", "rnn", "lstm")
#: What the evaluators read of a normalized window ``Y_t`` (:attr:`AgentConfig.input_scale`).
INPUT_SCALES: tuple[str, ...] = ("centred", "raw")
#: How a party's agent learns (:attr:`AgentConfig.learner`).
LEARNERS: tuple[str, ...] = ("direct", "actor_critic")
#: What of an actor-critic party's networks its federated vector holds (:attr:`AgentConfig.share`).
SHARES: tuple[str, ...] = ("actor_critic", "actor")
#: Which implementation computes the batched EIIEs' trunks (:attr:`AgentConfig.backend`, :mod:`portfed.agents.backend`).
BACKENDS: tuple[str, ...] = ("auto", "torch", "native")
#: How the engine runs a local step of its parties (:attr:`AgentConfig.capture`; :mod:`portfed.agents.captured`).
CAPTURES: tuple[str, ...] = ("none", "compile", "cuda_graph")


@dataclass(frozen=True)
class AgentConfig:
    """Validated agent hyper-parameters.

    Attributes:
        network: ``"cnn"`` (EIIE convolutional), ``"rnn"`` (Elman, tanh) or ``"lstm"``.
        window: ``l``, days of history the network sees.  The CNN needs ``l >= 3`` (its second
            convolution is ``1 × (l − 2)``); the recurrent nets need ``l >= 2`` (the first decision
            day must have a price relative into it, to drift the previous weights).
        batch_size: consecutive decision days per gradient step.
        learning_rate: Adam step size.
        weight_decay: ``λ`` of the L2 penalty ``λ/2 · ‖θ‖²`` added to the loss (all parameters).
            PGPortfolio's default network regularizes its layers with 5e-9 … 5e-8 (tflearn's
            ``λ · ‖W‖²/2``); 1e-8 sits in that range.
        commission: ``c``, the proportional cost of buying and of selling.  The linear cost factor
            ``μ = 1 − c Σ|w'_i − w_i|`` stays positive only for ``c < 0.5``.
        beta: geometric parameter of the online stochastic batch sampler (recent batches favoured).
        features: price features the network sees; ``close`` is required (windows are normalized
            by the latest close) and the tuple is stored in canonical panel order.
        conv_maps: feature maps of the CNN's first ``1 × 3`` convolution (2 in Jiang et al.).
        dense_maps: feature maps of the CNN's ``1 × (l − 2)`` convolution (20 in Jiang et al.).
        hidden_size: hidden units of the RNN / LSTM evaluator (20 in PGPortfolio).
        input_scale: what the evaluators read of the window ``Y_t = [v_{t−l+1} ⊘ v_t | … | 1]``:
            ``"raw"``, the price ratios themselves (paper 000 §8.2's state and Jiang et al.'s code), or
            ``"centred"``, ``Y_t − 1`` (a flat window is 0).  The two are one function class — a
            first-layer bias shifted by its kernel's sum turns one into the other — but not one
            training problem: on raw ratios ≈ 1 a first-layer unit's pre-activation is ≈ ΣW + b for
            every window, so a ReLU map can be off (dead) for every input from the start
            (:mod:`portfed.agents.networks`).  The default stays ``"centred"`` (measured on a
            validation year, ``docs/reports/reproduction.md``); the paper configs use ``"raw"``.
        adam_betas: ``(β₁, β₂)`` of Adam's moment averages (torch's defaults).
        adam_eps: ``ε`` of Adam's denominator (torch's default).
        learner: ``"direct"`` (the default: Jiang et al.'s gradient of the reward itself, no critic, no
            discount) or ``"actor_critic"`` (a critic ``Q_φ`` trained by TD(0) with discount ``gamma``
            and target networks, the actor following ``∇_a Q_φ``; :mod:`portfed.agents.actor_critic`).
        gamma: ``γ ∈ [0, 1)``, the discount of paper 001 §9's ``J(μ_θ) = E[Σ γ^{t−1} r(s_t, μ_θ(s_t))]``
            (0.99, paper 000 §8.2).  Only the actor-critic reads it: its TD target is
            ``r_t + γ Q'(s_{t+1}, μ'(s_{t+1}))``; the direct learner maximises the batch's mean reward.
        tau: ``τ ∈ (0, 1]`` of the soft target updates ``θ' ← τθ + (1 − τ)θ'`` (Lillicrap et al. 2016,
            Alg. 1; 0.005 as in TD3 and Stable-Baselines3's DDPG).
        critic_learning_rate: Adam step size of the critic (1e-3, Lillicrap et al. 2016 §7).
        critic_hidden: units of the critic's per-asset layer and of its layer after pooling.
        exploration_noise: ``σ ∈ [0, 1)`` of the actor-critic's exploration on the simplex: the portfolio
            held is ``b_t = (1 − σ) a_t + σ d_t``, ``d_t ~ Dirichlet(1, …, 1)`` from the party's own seeded
            generator (:mod:`portfed.agents.actor_critic` says why and when it is needed).
        share: what an actor-critic party's federated vector holds: ``"actor_critic"`` (actor then
            critic, the default) or ``"actor"`` (the critic stays private).  A federated config sets it as
            ``federation.share`` (and refuses ``agent.share``); the direct learner has only an actor.
        max_weight: ``u ∈ (0, 1]``, the most any one risky asset may weigh in a decision (cash exempt), or
            ``None`` (the default: no limit).  The policy's portfolio is projected exactly onto the limits
            (:mod:`portfed.agents.limits`) in training — the reward, the critic and the PVM see the projected
            portfolio, differentiated through the projection (:mod:`portfed.agents.limits_torch`; a limited
            agent trains on the PyTorch path, not the fused C kernels) — and in every backtest,
            ``allocate``, ``orders`` and ``backtest``.
        max_turnover: ``δ ∈ (0, 2]``, the most turnover ``Σ_{i≥1} |w_i − w'_i|`` (the environment's, what
            the commission is paid on) of one decision, or ``None`` (the default).  Enforced with
            ``max_weight`` by the same projection, wherever it acts.
        device: torch device the trainer computes on; ``"auto"`` (the default) is ``"cuda"`` when
            PyTorch sees a CUDA device and ``"cpu"`` otherwise, resolved here.  Parameters cross to
            NumPy only at the federation's server step, so every engine runs on either.
        backend: what computes the networks' trunks (:mod:`portfed.agents.backend`): ``"auto"`` (the
            default: the fused C kernels on an x86 CPU with AVX2 or AVX-512 where a C compiler builds them,
            else the PyTorch operations — after a warning when the build failed), ``"torch"`` (the PyTorch
            operations, the reference, on any device) or ``"native"`` (the kernels, an error where they
            cannot be built; the CPU only).  The
            environment variable ``PORTFED_NATIVE`` (``0``/``1``) overrides it.  The two agree to float32
            round-off, not bit for bit; resolved when a network is built, and recorded in ``run.json``.
            With a ``capture`` other than ``"none"``, ``"auto"`` is ``"torch"`` (:attr:`trunk_backend`).
        capture: how the batched engine runs a local step in which every party of the call trains
            (:mod:`portfed.agents.captured`): ``"none"`` (the default: operation by operation, on
            ``backend``), ``"compile"`` (the PyTorch step through ``torch.compile``, its day
            loops fused; on CUDA ``mode="reduce-overhead"``, CUDA graphs) or ``"cuda_graph"`` (the whole
            PyTorch step — forward, loss, backward, Adam, Fed+ mix, PVM write — recorded once in a
            ``torch.cuda.CUDAGraph`` and replayed; CUDA only).  Both equal ``"none"`` to float32 round-off
            and run the direct learner without trading limits; anything else is refused here.  A capture
            records the PyTorch step: ``backend: native`` with one is refused, and the steps a capture leaves
            eager (a straggler's shorter call) run the PyTorch operations too.
    """

    network: str = "cnn"
    window: int = 30
    batch_size: int = 50
    learning_rate: float = 5e-5
    weight_decay: float = 1e-8
    commission: float = 0.002
    beta: float = 5e-5
    features: tuple[str, ...] = ("close",)
    conv_maps: int = 2
    dense_maps: int = 20
    hidden_size: int = 20
    input_scale: str = "centred"
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    learner: str = "direct"
    gamma: float = 0.99
    tau: float = 0.005
    critic_learning_rate: float = 1e-3
    critic_hidden: int = 20
    exploration_noise: float = 0.3
    share: str = "actor_critic"
    max_weight: float | None = None
    max_turnover: float | None = None
    device: str = "auto"
    backend: str = "auto"
    capture: str = "none"

    def __post_init__(self) -> None:
        if self.network not in NETWORKS:
            raise ValueError(f"network must be one of {NETWORKS}, got {self.network!r}")
        min_window = 3 if self.network == "cnn" else 2
        _require_int("window", self.window, min_window)
        _require_int("batch_size", self.batch_size, 1)
        _require_int("conv_maps", self.conv_maps, 1)
        _require_int("dense_maps", self.dense_maps, 1)
        _require_int("hidden_size", self.hidden_size, 1)
        _require_int("critic_hidden", self.critic_hidden, 1)
        if self.learner not in LEARNERS:
            raise ValueError(f"learner must be one of {LEARNERS}, got {self.learner!r}")
        if self.learner == "actor_critic" and self.batch_size < 2:
            raise ValueError(f"learner 'actor_critic' needs batch_size >= 2 (its transitions are pairs of "
                             f"consecutive days of a batch), got {self.batch_size!r}")
        if self.share not in SHARES:
            raise ValueError(f"share must be one of {SHARES}, got {self.share!r}")
        if not (_is_number(self.gamma) and 0 <= self.gamma < 1):
            raise ValueError(f"gamma (discount) must be a number in [0, 1), got {self.gamma!r}")
        if not (_is_number(self.tau) and 0 < self.tau <= 1):
            raise ValueError(f"tau (soft target update) must be a number in (0, 1], got {self.tau!r}")
        if not (_is_number(self.exploration_noise) and 0 <= self.exploration_noise < 1):
            raise ValueError(f"exploration_noise must be a number in [0, 1), got {self.exploration_noise!r}")
        check_number(self.critic_learning_rate, "critic_learning_rate", minimum=0.0, strict_min=True)
        if self.input_scale not in INPUT_SCALES:
            raise ValueError(f"input_scale must be one of {INPUT_SCALES}, got {self.input_scale!r}")
        # Finite as well as in range: an infinite step or decay turns every update into inf/NaN (issue 47).
        check_number(self.learning_rate, "learning_rate", minimum=0.0, strict_min=True)
        check_number(self.weight_decay, "weight_decay", minimum=0.0)
        if not 0 <= self.commission < 0.5:
            raise ValueError(f"commission must lie in [0, 0.5), got {self.commission!r}")
        if not 0 < self.beta < 1:
            raise ValueError(f"beta (geometric parameter) must lie in (0, 1), got {self.beta!r}")
        betas = tuple(self.adam_betas)
        if len(betas) != 2 or not all(isinstance(b, int | float) and 0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"adam_betas must be two numbers in [0, 1), got {self.adam_betas!r}")
        object.__setattr__(self, "adam_betas", (float(betas[0]), float(betas[1])))
        check_number(self.adam_eps, "adam_eps", minimum=0.0, strict_min=True)
        features = tuple(self.features) if not isinstance(self.features, str) else (self.features,)
        unknown = [f for f in features if f not in PRICE_FEATURES]
        if unknown:
            raise ValueError(f"feature {unknown[0]!r} is not a price feature; choose from {PRICE_FEATURES}")
        if len(set(features)) != len(features):
            raise ValueError(f"features must be distinct, got {features}")
        if "close" not in features:
            raise ValueError(f"features must include 'close' (windows are normalized by it), got {features}")
        object.__setattr__(self, "features", tuple(f for f in FEATURE_ORDER if f in features))
        RiskLimits(self.max_weight, self.max_turnover)  # refuses values outside (0, 1] and (0, 2]
        if self.device == "auto":
            object.__setattr__(self, "device", "cuda" if torch.cuda.is_available() else "cpu")
        try:
            torch.device(self.device)
        except RuntimeError as exc:
            raise ValueError(f"device {self.device!r} is not a torch device: {exc}") from exc
        self._check_backend()
        self._check_capture()

    def _check_backend(self) -> None:
        """``backend`` is one of :data:`BACKENDS` and can run on ``device`` (the attribute's doc)."""
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.backend == "native" and torch.device(self.device).type != "cpu":
            raise ValueError(f"backend 'native' (the C kernels) runs on the CPU, not on device {self.device!r}; "
                             "use backend 'torch' or 'auto' there")

    def _check_capture(self) -> None:
        """``capture`` is one of :data:`CAPTURES` and can run here (the attribute's doc)."""
        if self.capture not in CAPTURES:
            raise ValueError(f"capture must be one of {CAPTURES}, got {self.capture!r}")
        if self.capture == "none":
            return
        if self.backend == "native":
            raise ValueError(f"capture {self.capture!r} records the PyTorch step, not the C kernels of backend "
                             "'native'; use backend 'torch' or 'auto' with it, or capture: none")
        if self.learner != "direct" or self.limits.active:
            what = f"learner {self.learner!r}" if self.learner != "direct" else "max_weight / max_turnover"
            raise ValueError(f"capture {self.capture!r} runs the direct learner without trading limits; "
                             f"{what} trains with capture: none")
        if self.capture == "cuda_graph" and torch.device(self.device).type != "cuda":
            raise ValueError(f"capture 'cuda_graph' needs a CUDA device, got device {self.device!r} "
                             "(capture: compile runs on the CPU too)")

    @property
    def trunk_backend(self) -> str:
        """The ``agent.backend`` the networks ask for (:func:`portfed.agents.backend.operations`): ``backend``,
        but ``"torch"`` for ``"auto"`` when ``capture`` records the step, so that a captured run's eager steps
        are the PyTorch step it records."""
        return "torch" if self.capture != "none" and self.backend == "auto" else self.backend

    @property
    def limits(self) -> RiskLimits:
        """The trading limits ``max_weight`` and ``max_turnover``."""
        return RiskLimits(self.max_weight, self.max_turnover)

    @property
    def n_features(self) -> int:
        return len(self.features)

    @property
    def input_offset(self) -> float:
        """What the evaluators subtract from a window: 1 (``centred``) or 0 (``raw``)."""
        return 1.0 if self.input_scale == "centred" else 0.0


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _require_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
