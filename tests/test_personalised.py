"""The papers' personalised baselines (SCAFFOLD, Ditto, pFedMe, Per-FedAvg, APFL, FedAvg-FT / FedProx-FT)
on problems with known answers, their equalities with the base algorithms, and bit-exact resume.

Quadratic parties ``f_k(w) = ½ (w − c_k)ᵀ A_k (w − c_k)`` take exact gradient steps, so the joint
optimum is ``(Σ A_k)⁻¹ Σ A_k c_k`` and each party's own optimum is ``c_k``; the supervised cohort
checks the equalities that must hold bit for bit with minibatches.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from portfed.federation import FederationState, PartyCohort, deployed_models, make_algorithm, run_rounds
from portfed.federation.cohort import CohortPlan
from portfed.federation.local_rules import PerFedAvgRule, ScaffoldRule
from portfed.federation.testing import QuadraticParty
from portfed.supervised.synthetic import fedprox_synthetic
from portfed.supervised.trainers import SupervisedCohort, make_parties

D = 3


def _parties(k: int = 2, seed: int = 0, learning_rate: float = 0.1) -> list[QuadraticParty]:
    rng = np.random.default_rng(seed)
    return [QuadraticParty.random(D, rng, spread=2.0, learning_rate=learning_rate) for _ in range(k)]


def _joint_optimum(parties: list[QuadraticParty]) -> np.ndarray:
    return np.linalg.solve(sum(p.hessian for p in parties), sum(p.hessian @ p.center for p in parties))


def _run(name: str, rounds: int, steps: int, parties: list[QuadraticParty] | None = None, **knobs: object):
    parties = _parties() if parties is None else parties
    return run_rounds(parties, make_algorithm(name, **knobs), rounds, steps, seed=0, init_params=np.zeros(D)).state


def test_scaffold_reaches_the_joint_optimum_where_fedavg_drifts() -> None:
    optimum = _joint_optimum(_parties())
    scaffold = _run("scaffold", 100, 20)
    fedavg = _run("fedavg", 100, 20)
    assert np.linalg.norm(scaffold.global_model - optimum) < 1e-8
    assert np.linalg.norm(fedavg.global_model - optimum) > 1e-2  # client drift: FedAvg stops elsewhere
    # the server control variate is the mean of the parties' (option II) control variates
    np.testing.assert_allclose(scaffold.extras["server_control"], scaffold.extras["controls"].mean(axis=0), atol=1e-12)


def test_scaffold_with_one_step_per_round_is_fedavg() -> None:
    """With E = 1, c_k⁺ = ∇f_k(x) and the correction c − c_k of round t+1 cancels nothing new: the global
    models of the first round coincide (the shift is zero in round 0)."""
    np.testing.assert_array_equal(_run("scaffold", 1, 1).global_model, _run("fedavg", 1, 1).global_model)


def test_ditto_without_regularisation_is_local_training_and_with_a_huge_one_fedavg() -> None:
    free = _run("ditto", 20, 5, personal_lambda=0.0)
    local = _run("local", 20, 5)
    np.testing.assert_allclose(free.extras["personal"], local.party_models, rtol=0, atol=1e-12)
    fedavg = _run("fedavg", 20, 5)
    np.testing.assert_array_equal(free.global_model, fedavg.global_model)  # the messages are FedAvg's
    tied = run_rounds(_parties(), make_algorithm("ditto", personal_lambda=1e12), 20, 5, seed=0,
                      init_params=np.zeros(D))
    before_last = _run("fedavg", 19, 5).global_model  # the w̃ the parties received in the last round
    np.testing.assert_allclose(tied.state.extras["personal"], np.tile(before_last, (2, 1)), atol=1e-9)
    np.testing.assert_allclose(deployed_models(make_algorithm("ditto", personal_lambda=1e12), tied.state),
                               np.tile(before_last, (2, 1)), atol=1e-9)


def test_pfedme_without_regularisation_reaches_each_local_optimum_and_with_a_huge_one_is_fedavg() -> None:
    parties = _parties()
    free = _run("pfedme", 3, 20, parties, personal_lambda=0.0, inner_steps=20, inner_lr=0.1)
    centers = np.stack([p.center for p in parties])
    np.testing.assert_allclose(free.extras["personal"], centers, atol=1e-8)  # θ_k = argmin f_k, local training's limit
    np.testing.assert_array_equal(free.global_model, np.zeros(D))  # λ = 0: w never moves
    tied = _run("pfedme", 10, 5, personal_lambda=1e6, inner_steps=5, inner_lr=0.1)
    np.testing.assert_allclose(tied.global_model, _run("fedavg", 10, 5).global_model, atol=1e-5)


def test_pfedme_beta_mixes_the_server_model() -> None:
    full = _run("pfedme", 1, 5, pfedme_beta=1.0)
    half = _run("pfedme", 1, 5, pfedme_beta=0.5)
    np.testing.assert_allclose(half.global_model, 0.5 * full.global_model)  # w̃⁰ = 0


def test_perfedavg_with_a_vanishing_inner_step_is_fedavg() -> None:
    meta = _run("perfedavg", 10, 5, inner_lr=1e-12, finetune_steps=0)
    np.testing.assert_allclose(meta.global_model, _run("fedavg", 10, 5).global_model, atol=1e-9)
    np.testing.assert_array_equal(meta.extras["personal"], np.tile(meta.global_model, (2, 1)))


def _data():
    return fedprox_synthetic(4, 1.0, 1.0, seed=3, max_samples=80)


def _supervised(name: str, rounds: int = 4, seed: int = 0, **knobs: object):
    data = _data()
    cohort = SupervisedCohort(data, 0.05, 5, seed)
    init = cohort.model.init_params(np.random.default_rng(1))
    spec = make_algorithm(name, **knobs)
    state = run_rounds(cohort, spec, rounds, [3, 3, 1, 3], k_per_round=3, seed=seed, init_params=init).state
    return spec, state


def test_apfl_with_alpha_0_is_fedavg_and_with_alpha_1_local_training() -> None:
    spec, apfl = _supervised("apfl", apfl_alpha=0.0)
    base_spec, fedavg = _supervised("fedavg")
    np.testing.assert_array_equal(deployed_models(spec, apfl), deployed_models(base_spec, fedavg))
    spec, apfl = _supervised("apfl", apfl_alpha=1.0)
    base_spec, local = _supervised("local")
    np.testing.assert_array_equal(deployed_models(spec, apfl), deployed_models(base_spec, local))


def test_apfl_adapts_alpha_within_the_unit_interval() -> None:
    _, state = _supervised("apfl", apfl_alpha=0.5, apfl_alpha_lr=0.5)
    alpha = state.extras["apfl_alpha"]
    assert np.all((alpha >= 0) & (alpha <= 1)) and np.any(alpha != 0.5)


@pytest.mark.parametrize("name, base", [("fedavg-ft", "fedavg"), ("fedprox-ft", "fedprox")])
def test_fine_tuning_with_zero_steps_equals_its_base(name: str, base: str) -> None:
    spec, tuned = _supervised(name, finetune_steps=0)
    base_spec, plain = _supervised(base)
    np.testing.assert_array_equal(tuned.global_model, plain.global_model)
    np.testing.assert_array_equal(deployed_models(spec, tuned), deployed_models(base_spec, plain))
    spec, tuned = _supervised(name, finetune_steps=3)
    assert not np.array_equal(deployed_models(spec, tuned), deployed_models(base_spec, plain))


@pytest.mark.parametrize("name, knobs", [("scaffold", {}), ("apfl", {"apfl_alpha_lr": 0.5}),
                                         ("perfedavg", {"finetune_steps": 2}), ("pfedme", {"inner_steps": 2})])
def test_the_batched_cohort_equals_the_per_party_engine(name: str, knobs: dict) -> None:
    data = _data()
    spec = make_algorithm(name, **knobs)
    init = SupervisedCohort(data, 0.05, 5, 0).model.init_params(np.random.default_rng(1))
    batched = run_rounds(SupervisedCohort(data, 0.05, 5, 0), spec, 3, 2, k_per_round=3, seed=0, init_params=init)
    single = run_rounds(PartyCohort(make_parties(data, 0.05, 5, 0)), spec, 3, 2, k_per_round=3, seed=0,
                        init_params=init)
    np.testing.assert_allclose(batched.state.party_models, single.state.party_models, rtol=0, atol=1e-12)
    for key, value in batched.state.extras.items():
        np.testing.assert_allclose(value, single.state.extras[key], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name, knobs", [("scaffold", {}), ("apfl", {"apfl_alpha": 0.3, "apfl_alpha_lr": 0.2}),
                                         ("ditto", {"personal_lambda": 0.5}), ("pfedme", {})])
def test_resume_is_bit_exact(name: str, knobs: dict) -> None:
    spec = make_algorithm(name, **knobs)
    straight = run_rounds(_parties(3), spec, 8, 4, k_per_round=2, seed=5, init_params=np.zeros(D)).state
    first = run_rounds(_parties(3), spec, 4, 4, k_per_round=2, seed=5, init_params=np.zeros(D)).state
    saved = pickle.loads(pickle.dumps(first.state_dict()))
    resumed = FederationState.from_state_dict(saved)
    assert set(resumed.extras) == set(straight.extras)
    parties = _parties(3)
    for party, model in zip(parties, resumed.party_models, strict=True):
        party.params = model.copy()
    again = run_rounds(parties, spec, 8, 4, k_per_round=2, seed=5, init_params=np.zeros(D), state=resumed).state
    np.testing.assert_array_equal(again.global_model, straight.global_model)
    for key, value in straight.extras.items():
        np.testing.assert_array_equal(again.extras[key], value)


def test_a_state_dict_without_the_control_variates_is_refused() -> None:
    state = _run("scaffold", 1, 2)
    saved = state.state_dict()
    saved["extras"] = {"controls": saved["extras"]["controls"]}
    with pytest.raises(ValueError, match="extras"):
        state.load_state_dict(saved)


def test_a_trainer_without_local_rules_is_refused_with_the_reason() -> None:
    class Plain:
        learning_rate = 0.1

        def local_train(self, params, steps, objective=None):  # pragma: no cover - never reached
            raise AssertionError

    plan = CohortPlan(round_index=0, parties=np.array([0]), steps=[1], start=np.zeros((1, D)),
                      rule=ScaffoldRule(shift=np.zeros((1, D))))
    with pytest.raises(TypeError, match="cannot run the local rule 'scaffold'"):
        PartyCohort([Plain()]).train(plan)


def test_run_rounds_refuses_an_algorithm_whose_local_rule_the_cohort_does_not_declare() -> None:
    """Cohorts declare the local rules they run; the refusal comes before any round, naming the rule."""
    class Plain:
        calls = 0

        def local_train(self, params, steps, objective=None):  # pragma: no cover - never reached
            Plain.calls += 1
            raise AssertionError

    with pytest.raises(ValueError, match=r"'apfl' trains with its own local iteration .*apfl\), which this cohort "
                                         r"\(PartyCohort\) does not run"):
        run_rounds([Plain(), Plain()], make_algorithm("apfl"), 2, 1, seed=0, init_params=np.zeros(D))
    assert Plain.calls == 0
    assert PartyCohort(_parties()).local_rules >= make_algorithm("perfedavg").local_rules == {"perfedavg", "adapt"}
    assert not make_algorithm("ditto").local_rules and not make_algorithm("fedavg-ft").local_rules


def test_bad_knobs_and_plans_are_refused() -> None:
    with pytest.raises(ValueError, match="apfl_alpha"):
        make_algorithm("apfl", apfl_alpha=1.5)
    with pytest.raises(ValueError, match="inner_steps"):
        make_algorithm("pfedme", inner_steps=0)
    with pytest.raises(ValueError, match="takes no parameter"):
        make_algorithm("scaffold", personal_lambda=1.0)
    with pytest.raises(ValueError, match="replaces the plain step"):
        CohortPlan(round_index=0, parties=np.array([0]), steps=[1], start=np.zeros((1, D)),
                   target=np.zeros((1, D)), sigma=[0.5], rule=PerFedAvgRule(inner_lr=0.1))


def test_portfolio_configs_refuse_the_baselines_their_trainers_cannot_run() -> None:
    from pydantic import ValidationError

    from portfed.experiment.config import FederationSection

    with pytest.raises(ValidationError, match="ditto, fedavg-ft and fedprox-ft"):
        FederationSection(algorithms=["apfl"])
    FederationSection(algorithms=["ditto", "fedavg-ft"])


@pytest.mark.parametrize("name", ["scaffold", "pfedme", "perfedavg", "apfl"])
def test_compare_refuses_a_rule_based_baseline_named_on_the_command_line_in_one_line(tmp_path, name) -> None:
    """``portfed compare configs/tiny.yaml -a scaffold`` stops before any work with one line naming the
    algorithm and its local rule (it used to die in the batched engine with a traceback)."""
    from typer.testing import CliRunner

    from portfed.cli.main import app
    from portfed.docgen import ROOT

    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["compare", str(ROOT / "configs" / "tiny.yaml"), "-a", name, "--out", str(out)],
                                terminal_width=400)
    assert result.exit_code == 1
    text = " ".join(result.output.split())  # one message, however the console wraps it
    assert text.startswith(f"error: --algorithms: algorithm '{name}' trains with its own local iteration"), text
    assert text.count("error:") == 1 and text.endswith("ditto, fedavg-ft and fedprox-ft) does not run"), text
    assert "Traceback" not in result.output and not out.exists()


def test_the_batched_portfolio_engine_refuses_a_local_rule() -> None:
    from engines import CONFIG, SEEDS, random_walk

    from portfed.agents.batched import BatchedDPGTrainer

    engine = BatchedDPGTrainer(CONFIG, [random_walk(60, seed) for seed in SEEDS[:2]], SEEDS[:2])
    d = engine.n_parameters
    plan = CohortPlan(round_index=0, parties=np.array([0]), steps=[1], start=np.zeros((1, d)),
                      rule=ScaffoldRule(shift=np.zeros((1, d))))
    with pytest.raises(ValueError, match="local rule 'scaffold'"):
        engine.train(plan)
