"""The knobs of the personalised baselines, one frozen value on every :class:`~portfed.federation.AlgorithmSpec`.

``kind`` names the baseline (``none`` for every Fed+ / FedAvg-type row); what each kind does in a
round is in :mod:`.personal_rounds`, its local iterations in :mod:`.local_rules`.

==================  =======================================================================
knob                meaning
==================  =======================================================================
``personal_lambda`` Ditto's λ (personal model pulled towards the global one), pFedMe's λ
``inner_steps``     pFedMe's K: proximal-gradient steps on the personal model per local step
``inner_lr``        pFedMe's personal step ν; Per-FedAvg's inner step α (training and adaptation)
``pfedme_beta``     pFedMe's server step β: ``w̃ ← (1 − β) w̃ + β mean(w_k)``
``apfl_alpha``      APFL's initial mixing weight α ∈ [0, 1] (0: the global model, 1: the local one)
``apfl_alpha_lr``   APFL's step on α (0: α stays fixed)
``finetune_steps``  FedAvg-FT / FedProx-FT: local steps that fine-tune the global model before it is
                    deployed; Per-FedAvg: adaptation steps of size α (0: deploy the global model)
==================  =======================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from portfed.validation import check_int

PERSONAL_KINDS: tuple[str, ...] = ("none", "scaffold", "ditto", "pfedme", "perfedavg", "apfl", "finetune")
PERSONAL_KNOBS: tuple[str, ...] = ("personal_lambda", "inner_steps", "inner_lr", "pfedme_beta", "apfl_alpha",
                                   "apfl_alpha_lr", "finetune_steps")


@dataclass(frozen=True)
class Personalization:
    """A personalised baseline's kind and knobs (module docstring); ``Personalization()`` is none."""

    kind: str = "none"
    personal_lambda: float = 1.0
    inner_steps: int = 5
    inner_lr: float = 0.01
    pfedme_beta: float = 1.0
    apfl_alpha: float = 0.25
    apfl_alpha_lr: float = 0.0
    finetune_steps: int = 0

    def __post_init__(self) -> None:
        if self.kind not in PERSONAL_KINDS:
            raise ValueError(f"unknown personalisation {self.kind!r}; valid: {', '.join(PERSONAL_KINDS)}")
        for name in ("inner_steps", "finetune_steps"):
            object.__setattr__(self, name, check_int(getattr(self, name), name,
                                                     minimum=1 if name == "inner_steps" else 0))
        for name, low, high in (("personal_lambda", 0.0, np.inf), ("inner_lr", 0.0, np.inf), ("pfedme_beta", 0.0, 1.0),
                                ("apfl_alpha", 0.0, 1.0), ("apfl_alpha_lr", 0.0, np.inf)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
                raise ValueError(f"{name} must be a number, got {value!r}")
            value = float(value)
            if not np.isfinite(value) or not low <= value <= high:
                raise ValueError(f"{name} must be a finite number in [{low:g}, {high:g}], got {value!r}")
            object.__setattr__(self, name, value)
        if self.kind in ("pfedme", "perfedavg") and self.inner_lr <= 0:
            raise ValueError(f"{self.kind} needs inner_lr > 0, got {self.inner_lr!r}")
        if self.kind == "pfedme" and self.pfedme_beta <= 0:
            raise ValueError(f"pfedme needs pfedme_beta > 0, got {self.pfedme_beta!r}")

    @property
    def deploys_personal(self) -> bool:
        """Whether a party deploys a model of its own rather than the algorithm's usual one."""
        return self.kind not in ("none", "scaffold")
