"""The portfolio environment (Jiang, Xu & Liang 2017; DESIGN.md §2) and its transaction-cost model.

Importing this package registers ``portfed/Portfolio-v0`` with Gymnasium, so
``gymnasium.make("portfed/Portfolio-v0", prices=...)`` builds a :class:`PortfolioEnv`.
"""

import gymnasium

from portfed.envs.costs import linear_remainder, transaction_remainder
from portfed.envs.portfolio_env import ActionError, NonFiniteActionError, PortfolioEnv
from portfed.envs.windows import price_windows
from portfed.envs.wrappers import SoftmaxActionWrapper

ENV_ID = "portfed/Portfolio-v0"

# Re-importing (e.g. importlib.reload) must not register the id twice: Gymnasium warns on that.
if ENV_ID not in gymnasium.registry:
    gymnasium.register(id=ENV_ID, entry_point="portfed.envs.portfolio_env:PortfolioEnv")

__all__ = [
    "ENV_ID",
    "ActionError",
    "NonFiniteActionError",
    "PortfolioEnv",
    "SoftmaxActionWrapper",
    "linear_remainder",
    "price_windows",
    "transaction_remainder",
]
