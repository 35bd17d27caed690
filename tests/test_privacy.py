"""Party-level differential privacy (portfed.privacy): clipping, noise, seeding, the accountant, the refusals,
and the non-private run recovered bit for bit at z = 0, S = ∞."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from types import SimpleNamespace

import dp_accounting
import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.optimize import brentq
from scipy.stats import norm

from portfed.evaluation import metrics_table_markdown
from portfed.experiment.config import ConfigError, parse_config
from portfed.experiment.party import build_federation
from portfed.experiment.reports.tables import privacy_column, with_privacy
from portfed.experiment.reports.tearsheets import privacy_summary
from portfed.experiment.runs import InProcessParties, run_fingerprint, train_parties
from portfed.federation import LocalObjective, make_algorithm, run_rounds
from portfed.federation.faults import Fault
from portfed.federation.testing import QuadraticParty
from portfed.privacy import PartyPrivacy, PrivacySettings, calibrate, central_mean, clip_updates, epsilon
from portfed.privacy.mechanism import CENTRAL_STREAM, noise_generator
from portfed.privacy.report import PrivacyLedger, describe

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())


def tiny(privacy: dict | None = None, **federation) -> dict:
    raw = copy.deepcopy(TINY)
    raw["federation"].update(federation)
    if privacy is not None:
        raw["privacy"] = privacy
    return raw


def quadratic_parties(n: int = 5, d: int = 4, seed: int = 3) -> list[QuadraticParty]:
    rng = np.random.default_rng(seed)
    return [QuadraticParty.random(d, rng, spread=2.0) for _ in range(n)]


def run(algorithm: str, privacy: PrivacySettings | None, *, seed: int = 0, k: int | None = None, rounds: int = 6):
    spec = make_algorithm(algorithm)
    return run_rounds(quadratic_parties(), spec, rounds, 3, k_per_round=k, seed=seed, init_params=np.zeros(4),
                      privacy=None if privacy is None else PartyPrivacy(privacy)).state


# ----------------------------------------------------------------------------------------------- mechanism
def test_every_clipped_update_has_norm_at_most_s_and_short_ones_are_untouched() -> None:
    rng = np.random.default_rng(0)
    reference = rng.normal(size=30)
    scales = np.array([0.01, 0.5, 1.0, 3.0, 100.0, 1e6])
    models = reference + rng.normal(size=(6, 30)) * scales[:, None] / np.sqrt(30)
    clipped = clip_updates(models, reference, clip=1.5)
    before = np.linalg.norm(models - reference, axis=1)
    after = np.linalg.norm(clipped - reference, axis=1)
    assert np.all(after <= 1.5 * (1 + 1e-12))
    short = before <= 1.5
    assert short.any() and (~short).any()
    assert np.array_equal(clipped[short], models[short])  # bit for bit
    np.testing.assert_allclose(after[~short], 1.5)
    # the direction of a clipped update is kept
    cos = np.sum((clipped - reference) * (models - reference), axis=1) / (after * before)
    np.testing.assert_allclose(cos, 1.0)


def test_central_noise_has_std_zs_over_k_and_a_missing_reply_counts_as_a_zero_update() -> None:
    settings = PrivacySettings(clip=2.0, noise_multiplier=1.3, delta=1e-5)
    d, k = 200_000, 8
    w = np.zeros(d)
    noisy = central_mean(np.zeros((k, d)), w, settings, k, np.random.default_rng(1))
    assert abs(noisy.std() / (1.3 * 2.0 / k) - 1) < 0.01
    assert abs(noisy.mean()) < 5 * (1.3 * 2.0 / k) / np.sqrt(d)
    # fixed denominator: 3 of 5 planned replies, each an update of norm 1 along e_0 → w̃ + 3/5 e_0
    quiet = PrivacySettings(clip=2.0, noise_multiplier=0.0, delta=1e-5)
    replies = np.zeros((3, 4))
    replies[:, 0] = 1.0
    np.testing.assert_allclose(central_mean(replies, np.zeros(4), quiet, 5, np.random.default_rng(0)),
                               [0.6, 0, 0, 0])
    with pytest.raises(ValueError, match="4 replies for a planned cohort of 3"):
        central_mean(np.zeros((4, 4)), np.zeros(4), quiet, 3, np.random.default_rng(0))


@pytest.mark.parametrize("mode", ["central", "local"])
def test_the_same_seed_gives_the_same_noisy_run_and_another_seed_another(mode) -> None:
    settings = PrivacySettings(clip=0.5, noise_multiplier=1.0, delta=1e-5, mode=mode)
    a, b, c = run("fedavg", settings, k=3), run("fedavg", settings, k=3), run("fedavg", settings, seed=1, k=3)
    assert np.array_equal(a.global_model, b.global_model) and np.array_equal(a.party_models, b.party_models)
    assert not np.allclose(a.global_model, c.global_model)
    plain = run("fedavg", None, k=3)
    assert not np.allclose(a.global_model, plain.global_model)  # the noise reached the model


def test_central_noise_is_drawn_once_per_round_from_the_seed_and_round() -> None:
    """The sampling stream is untouched: a private run samples the parties its non-private twin samples."""
    settings = PrivacySettings(clip=1e9, noise_multiplier=1.0, delta=1e-5)
    private, plain = run("fedavg", settings, k=2), run("fedavg", None, k=2)
    assert private.rng.bit_generator.state == plain.rng.bit_generator.state
    first = noise_generator(0, CENTRAL_STREAM, 0).normal(size=3)
    assert np.array_equal(first, noise_generator(0, CENTRAL_STREAM, 0).normal(size=3))
    assert not np.array_equal(first, noise_generator(0, CENTRAL_STREAM, 1).normal(size=3))


@pytest.mark.parametrize("mode", ["central", "local"])
@pytest.mark.parametrize(("algorithm", "k"), [("fedavg", None), ("fedavg", 3), ("fedavg+", 3), ("fedadam", None),
                                              ("ditto", 3)])
def test_z_zero_and_s_infinite_give_the_non_private_run_bit_for_bit(mode, algorithm, k) -> None:
    settings = PrivacySettings(clip=math.inf, noise_multiplier=0.0, delta=1e-5, mode=mode)
    private, plain = run(algorithm, settings, k=k), run(algorithm, None, k=k)
    assert np.array_equal(private.global_model, plain.global_model)
    assert np.array_equal(private.party_models, plain.party_models)
    for name, array in plain.extras.items():
        assert np.array_equal(private.extras[name], array), name


def test_clipping_alone_changes_the_run() -> None:
    """The bit-for-bit test above is not vacuous: a finite S without noise moves the global model."""
    settings = PrivacySettings(clip=0.01, noise_multiplier=0.0, delta=1e-5)
    assert not np.allclose(run("fedavg", settings).global_model, run("fedavg", None).global_model)


# ----------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("algorithm", ["comed", "rfa", "fedcomed+", "fedgeomed+", "fedmgda+", "fedamp", "scaffold"])
def test_central_dp_refuses_rules_without_an_s_over_k_sensitivity(algorithm) -> None:
    with pytest.raises(ValueError, match=re.escape(f"cannot protect {algorithm!r}")):
        run(algorithm, PrivacySettings(clip=1.0, noise_multiplier=1.0, delta=1e-5))


def test_central_dp_with_a_median_rule_is_refused_at_config_load() -> None:
    with pytest.raises(ConfigError, match="privacy.mode central cannot protect 'fedcomed\\+'.*no S/K bound"):
        parse_config(tiny({"clip": 1.0, "noise_multiplier": 1.0}, algorithms=["fedavg", "fedcomed+"]))
    # local DP protects it: the server only post-processes noisy messages
    config = parse_config(tiny({"clip": 1.0, "noise_multiplier": 1.0, "mode": "local"}, algorithms=["fedcomed+"]))
    assert config.privacy_settings().mode == "local"


def test_central_dp_refuses_the_update_norm_screen_and_local_dp_keeps_it() -> None:
    with pytest.raises(ConfigError, match="federation.screen_factor: the norm screen lets one party's update"):
        parse_config(tiny({"clip": 1.0, "noise_multiplier": 1.0}, screen_factor=5.0))
    parse_config(tiny({"clip": 1.0, "noise_multiplier": 1.0, "mode": "local"}, screen_factor=5.0))
    with pytest.raises(ValueError, match="remove screen_factor"):
        run_rounds(quadratic_parties(), make_algorithm("fedavg"), 2, 1, seed=0, init_params=np.zeros(4),
                   screen_factor=5.0, privacy=PartyPrivacy(PrivacySettings(clip=1.0, noise_multiplier=1.0, delta=1e-5)))


@pytest.mark.parametrize("mode", ["central", "local"])
def test_privacy_refuses_averaged_optimizer_states(mode) -> None:
    with pytest.raises(ConfigError, match="optimizer_state average: the parties' optimizer moments"):
        parse_config(tiny({"clip": 1.0, "noise_multiplier": 1.0, "mode": mode}, optimizer_state="average"))


def test_a_run_calibrated_to_a_target_epsilon_is_not_resumed_for_more_rounds() -> None:
    """The checkpoint's fingerprint holds the resolved z: more rounds would mean another z for the same target."""
    def fingerprint(privacy: dict, rounds: int) -> str:
        return run_fingerprint(parse_config(tiny(privacy, rounds=rounds)), "fedavg")

    target, fixed = {"clip": 1.0, "target_epsilon": 4.0}, {"clip": 1.0, "noise_multiplier": 1.0}
    assert fingerprint(target, 6) != fingerprint(target, 8)
    assert fingerprint(fixed, 6) == fingerprint(fixed, 8)  # a fixed z composes on: ε grows with the rounds
    assert fingerprint(fixed, 6) != run_fingerprint(parse_config(tiny(rounds=6)), "fedavg")


def test_central_dp_refuses_unequal_party_weights() -> None:
    spec = make_algorithm("fedavg")
    with pytest.raises(ValueError, match="uniform weights"):
        run_rounds(quadratic_parties(), spec, 2, 1, seed=0, init_params=np.zeros(4), party_weights=[1, 2, 1, 1, 1],
                   privacy=PartyPrivacy(PrivacySettings(clip=1.0, noise_multiplier=1.0, delta=1e-5)))


@pytest.mark.parametrize(("privacy", "message"), [
    ({"clip": 1.0, "target_epsilon": 1e-4}, "target_epsilon = 0.0001 is out of reach"),
    ({"clip": 1.0}, "exactly one of noise_multiplier and target_epsilon"),
    ({"clip": 1.0, "noise_multiplier": 1.0, "target_epsilon": 2.0}, "exactly one of"),
    ({"clip": 1.0, "noise_multiplier": 1.0, "delta": 0.5}, "must be below 1/parties.count"),
    ({"clip": math.inf, "noise_multiplier": 1.0}, "noise std z·S would be infinite"),
])
def test_bad_privacy_settings_are_refused_at_load_in_one_line(privacy, message) -> None:
    raw = tiny(privacy)
    with pytest.raises(ConfigError, match=message) as caught:
        parse_config(raw)
    assert "Traceback" not in str(caught.value)


# ----------------------------------------------------------------------------------------------- accountant
def analytic_gaussian_epsilon(sigma: float, delta: float) -> float:
    """Balle & Wang 2018 (Thm. 8): the exact ε of the Gaussian mechanism with noise multiplier σ at δ, solving
    δ = Φ(−εσ + 1/(2σ)) − e^ε Φ(−εσ − 1/(2σ))."""
    def gap(eps: float) -> float:
        return norm.cdf(-eps * sigma + 1 / (2 * sigma)) - math.exp(eps) * norm.cdf(-eps * sigma - 1 / (2 * sigma)) - delta
    return brentq(gap, 0.0, 500.0, xtol=1e-12)


@pytest.mark.parametrize(("z", "rounds"), [(0.8, 10), (1.0, 100), (2.0, 50), (5.0, 400)])
def test_the_accountant_never_falls_below_the_exact_epsilon_of_the_composed_gaussian(z, rounds) -> None:
    """At full participation T rounds with multiplier z are one Gaussian with multiplier z/√T."""
    exact = analytic_gaussian_epsilon(z / math.sqrt(rounds), 1e-5)
    ours = epsilon(z, 1.0, rounds, 1e-5)
    assert exact <= ours < 2 * exact
    assert exact == pytest.approx(dp_accounting.get_epsilon_gaussian(z / math.sqrt(rounds), 1e-5), rel=1e-6)


@pytest.mark.parametrize(("z", "q", "rounds"), [(1.0, 1.0, 30), (1.1, 0.2, 100), (0.7, 0.5, 7)])
def test_epsilon_is_the_librarys_for_the_same_z_rounds_and_sampling(z, q, rounds) -> None:
    event = dp_accounting.GaussianDpEvent(z)
    if q < 1:
        event = dp_accounting.PoissonSampledDpEvent(q, event)
    library = dp_accounting.rdp.RdpAccountant().compose(event, rounds).get_epsilon(1e-5)
    assert epsilon(z, q, rounds, 1e-5) == library
    assert epsilon(z, q, 0, 1e-5) == 0 and epsilon(0.0, q, rounds, 1e-5) == math.inf


def test_target_epsilon_calibrates_the_smallest_noise_that_meets_it() -> None:
    z = calibrate(4.0, 0.3, 50, 1e-5)
    assert epsilon(z, 0.3, 50, 1e-5) <= 4.0 < epsilon(z * 0.999, 0.3, 50, 1e-5)
    with pytest.raises(ValueError, match="out of reach"):
        calibrate(1e-4, 0.3, 50, 1e-5)


# ----------------------------------------------------------------------------------------------- the run's ε
def test_the_ledger_reports_the_runs_epsilon_central_and_each_partys_own_local() -> None:
    rows = [{"round": t, "party": k, "active": k != 2 or t == 0} for t in range(3) for k in range(3)]
    central = PrivacyLedger(PrivacySettings(clip=1.0, noise_multiplier=1.0, delta=1e-5), 0.5)
    local = PrivacyLedger(PrivacySettings(clip=1.0, noise_multiplier=1.0, delta=1e-5, mode="local"), 0.5)
    for t in range(3):
        done_c, done_l = central.add(rows[3 * t: 3 * t + 3]), local.add(rows[3 * t: 3 * t + 3])
        assert {r["epsilon"] for r in done_c} == {epsilon(1.0, 0.5, t + 1, 1e-5)}
        assert [r["epsilon"] for r in done_l] == [epsilon(1.0, 1.0, t + 1, 1e-5)] * 2 + [epsilon(1.0, 1.0, 1, 1e-5)]
    resumed = PrivacyLedger(local.settings, 0.5, rows)
    assert resumed.epsilon_of(0) == local.epsilon_of(0) and resumed.epsilon_of(2) == local.epsilon_of(2)
    line = describe(central.settings, 0.5, 3, central.epsilon_of(0))
    for part in ("party-level", "δ = 1e-05", "z = 1", "S = 1", "3 rounds", "Poisson q = 0.5", "RDP (dp-accounting"):
        assert part in line


@pytest.fixture(scope="module")
def federation():
    return build_federation(parse_config(tiny()), progress=False)


def _train(raw: dict, federation, out: Path, name: str = "fedavg"):
    config = parse_config(raw)
    parties = copy.deepcopy(federation.parties)
    return config, train_parties(config, name, InProcessParties(parties), out, progress=False)


def test_a_private_tiny_run_records_the_librarys_epsilon_and_z0_s_inf_is_the_plain_run(federation, tmp_path) -> None:
    _, plain = _train(tiny(parties_per_round=2), federation, tmp_path / "plain")
    _, same = _train(tiny({"clip": math.inf, "noise_multiplier": 0.0}, parties_per_round=2), federation,
                     tmp_path / "z0")
    assert np.array_equal(plain.state.global_model, same.state.global_model)
    assert np.array_equal(plain.deployed, same.deployed)
    assert "epsilon" not in plain.rows[0] and all(r["epsilon"] == math.inf for r in same.rows)

    config, noisy = _train(tiny({"clip": 1.0, "target_epsilon": 8.0}, parties_per_round=2), federation,
                           tmp_path / "noisy")
    z = config.privacy_settings().noise_multiplier
    library = dp_accounting.rdp.RdpAccountant().compose(
        dp_accounting.PoissonSampledDpEvent(2 / 3, dp_accounting.GaussianDpEvent(z)), 6).get_epsilon(1e-5)
    last = [r["epsilon"] for r in noisy.rows if r["round"] == 5]
    assert last == [library] * 3 and library <= 8.0
    assert not np.allclose(noisy.state.global_model, plain.state.global_model)


# ----------------------------------------------------------------------------------------------- Table 1, tearsheet
def test_table1_gets_each_algorithms_final_epsilon_and_a_note_naming_the_guarantee() -> None:
    config = parse_config(tiny({"clip": 1.0, "noise_multiplier": 1.0, "mode": "local"}, algorithms=["fedavg", "local"]))
    table = pd.DataFrame({"Annualized return (fraction)": [0.1, 0.2, 0.3]},
                         index=pd.Index(["fedavg", "local", "UCRP"], name="Strategy"))
    table.attrs["note"] = "Held-out period: 40 trading days."
    rounds = {"fedavg": pd.DataFrame({"epsilon": [0.5, 2.0, 1.0]}), "local": pd.DataFrame({"epsilon": [0.1, 0.3]})}
    out = with_privacy(table, config, rounds)
    assert out[privacy_column(1e-5)].tolist() == [2.0, 0.3, "—"]
    note = out.attrs["note"]
    assert note.startswith("Held-out period: 40 trading days.\n\nparty-level DP, local: ε = 2 at δ = 1e-05")
    for part in ("z = 1,", "S = 1,", "6 rounds", "none credited", "RDP (dp-accounting 0.6.0)", "not the evaluation"):
        assert part in note
    assert "ε at δ = 1e-05 (party-level)" in metrics_table_markdown(out)
    assert with_privacy(table, parse_config(tiny()), {}) is table  # no privacy section: Table 1 as it was


def test_the_tearsheet_names_an_algorithms_epsilon_and_its_guarantee() -> None:
    table = pd.DataFrame({privacy_column(1e-5): [2.0, "—"]}, index=pd.Index(["fedavg", "UCRP"], name="Strategy"))
    table.attrs["note"] = "Held-out.\n\nparty-level DP, central: ε = 2 at δ = 1e-05, … accountant RDP."
    summary = privacy_summary(SimpleNamespace(table=table), "fedavg")
    assert "ε at δ = 1e-05 (party-level) = 2</b>" in summary and "party-level DP, central" in summary
    assert "Held-out" not in summary
    assert privacy_summary(SimpleNamespace(table=table.drop(columns=table.columns)), "fedavg") == ""


def test_the_curve_config_loads_with_each_cells_settings() -> None:
    """benchmarks/privacy_curve.sh's cells: central DP for the mean family, local DP for a median rule."""
    from portfed.experiment.config import apply_overrides

    raw = yaml.safe_load((Path(__file__).parents[1] / "configs" / "privacy_curve.yaml").read_text())
    base = parse_config(raw)
    assert base.privacy is None and base.federation.rounds == 100 and base.parties.count == 10
    for mode, algorithms in (("central", "[fedavg,fedavg+]"), ("local", "[fedavg,fedcomed+]")):
        cell = parse_config(apply_overrides(raw, [f"federation.algorithms={algorithms}", f"privacy.mode={mode}",
                                                  "privacy.target_epsilon=4", "privacy.clip=0.1"]))
        settings = cell.privacy_settings()
        assert settings.mode == mode and epsilon(settings.noise_multiplier, 1.0, 100, 1e-5) <= 4.0


def test_the_cli_refuses_a_median_rule_under_central_dp_in_one_line_before_writing(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from portfed.cli.main import app

    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny({"clip": 1.0, "noise_multiplier": 1.0})))
    result = CliRunner().invoke(app, ["compare", str(config), "--algorithms", "fedavg,comed", "--out",
                                      str(tmp_path / "o"), "-q"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "privacy.mode central cannot protect 'comed'" in " ".join(result.output.split())
    assert not (tmp_path / "o").exists()


def test_a_round_without_any_usable_reply_still_releases_a_noisy_model_under_central_dp() -> None:
    """Every reply of round 1 is non-finite (quarantined): the release is w̃ + N(0, (zS/K)²), not w̃ unchanged."""
    settings = PrivacySettings(clip=1.0, noise_multiplier=2.0, delta=1e-5)

    def global_after(rounds: int, privacy: PrivacySettings | None) -> np.ndarray:
        return run_rounds(quadratic_parties(d=400), make_algorithm("fedavg"), rounds, 3, seed=0,
                          init_params=np.zeros(400), faults=[Fault("nan", tuple(range(5)), (1,))],
                          privacy=None if privacy is None else PartyPrivacy(privacy)).state.global_model

    assert np.array_equal(global_after(1, None), global_after(2, None))  # without DP nothing is released
    moved = global_after(2, settings) - global_after(1, settings)
    assert abs(moved.std() / (2.0 * 1.0 / 5) - 1) < 0.15  # 400 draws: a 15 % band is > 4 standard errors


class SelfNoisingParties:
    """Parties that make their own rounds and send their local-DP messages (a cohort with ``private_messages``, as the
    Flower nodes under ``privacy.mode: local``): each keeps its own model, plans from it and the plan's references."""

    private_messages = True

    def __init__(self, parties: list[QuadraticParty], algorithm, settings: PrivacySettings, seed: int) -> None:
        self.parties, self.algorithm, self.settings, self.seed = parties, algorithm, settings, seed
        self.own = np.zeros((len(parties), 4))

    @property
    def n_parties(self) -> int:
        return len(self.parties)

    def train(self, plan):
        from portfed.federation import CohortResult
        from portfed.privacy import local_messages

        rows, rewards = [], []
        for row, k in enumerate(plan.parties.tolist()):
            solve = self.algorithm.local_solve(self.own[k][None], plan.references[row][None], plan.round_index)
            objective = LocalObjective(target=None if solve.target is None else solve.target[0], sigma=solve.sigma)
            result = self.parties[k].local_train(solve.start[0], int(plan.steps[row]), objective)
            self.own[k] = result.params
            rows.append(local_messages(result.params[None], plan.references[row][None], np.array([k]), self.settings,
                                       self.seed, plan.round_index)[0])
            rewards.append(result.records[-1].mean_log_return)
        return CohortResult(params=np.stack(rows), train_reward=np.array(rewards), train_loss=np.zeros(len(rows)))


@pytest.mark.parametrize("algorithm", ["fedavg", "fedavg+", "fedcomed+"])
def test_a_cohort_whose_parties_noise_their_own_messages_is_not_noised_again(algorithm) -> None:
    """The round loop hands such a cohort the references and takes its messages as they are: the run equals the one
    whose loop noises the parties' models, and the server's copies of the party models are the messages."""
    settings = PrivacySettings(clip=0.5, noise_multiplier=1.0, delta=1e-5, mode="local")
    spec = make_algorithm(algorithm)
    cohort = SelfNoisingParties(quadratic_parties(), spec, settings, seed=0)
    own = run_rounds(cohort, spec, 6, 3, k_per_round=3, seed=0, init_params=np.zeros(4),
                     privacy=PartyPrivacy(settings)).state
    in_loop = run(algorithm, settings, k=3)
    np.testing.assert_allclose(own.global_model, in_loop.global_model, rtol=0, atol=1e-12)
    np.testing.assert_allclose(cohort.own, in_loop.party_models, rtol=0, atol=1e-12)
    assert np.abs(own.party_models - in_loop.party_models).max() > 0.1


def test_a_cohort_of_self_noising_parties_needs_privacy_and_an_algorithm_parties_can_run() -> None:
    settings = PrivacySettings(clip=0.5, noise_multiplier=1.0, delta=1e-5, mode="local")
    cohort = SelfNoisingParties(quadratic_parties(), make_algorithm("fedavg"), settings, seed=0)
    with pytest.raises(ValueError, match="clip and noise their own messages, but the run has no privacy"):
        run_rounds(cohort, make_algorithm("fedavg"), 2, 3, seed=0, init_params=np.zeros(4))
    with pytest.raises(ValueError, match="'ditto' keeps each party's personal state on the server"):
        run_rounds(cohort, make_algorithm("ditto"), 2, 3, seed=0, init_params=np.zeros(4), privacy=PartyPrivacy(settings))


def test_the_curve_table_shows_t_intervals_and_paired_differences_over_the_seeds_both_finished() -> None:
    """benchmarks/privacy_curve.py's table: mean [t interval] per cell, the Fed+ variant minus FedAvg paired by seed."""
    import importlib.util

    from portfed.evaluation.intervals import paired_interval, t_interval

    spec = importlib.util.spec_from_file_location("privacy_curve", Path(__file__).parents[1] / "benchmarks"
                                                  / "privacy_curve.py")
    curve = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(curve)
    rows = []
    for mode, target, returns in (("central", 2.0, {"fedavg": [0.10, 0.20, 0.30], "fedavg+": [0.15, 0.20, 0.40]}),
                                  ("local", 2.0, {"fedavg": [-0.1, 0.0, 0.1], "fedcomed+": [0.2, 0.3]}),
                                  ("none", math.inf, {"fedavg": [0.3, 0.3, 0.33], "fedavg+": [0.31, 0.3, 0.3],
                                                      "fedcomed+": [0.3, 0.31, 0.3]})):
        rows += [{"mode": mode, "target_epsilon": target, "algorithm": a, "seed": s, "annualized_return": r}
                 for a, values in returns.items() for s, r in enumerate(values)]
    lines = curve.table(pd.DataFrame(rows), {2.0: "21.49"}).splitlines()
    assert lines[0].startswith("| ε | z | central: FedAvg | central: FedAvg+ | FedAvg+ − FedAvg | local: FedAvg |")
    two = lines[2].split(" | ")
    assert two[:2] == ["| 2", "21.49"]
    iv = t_interval([10.0, 20.0, 30.0])
    assert two[2] == f"{iv.mean:.2f} [{iv.low:.2f}, {iv.high:.2f}]".replace("-", "−")
    d = paired_interval([15.0, 20.0, 40.0], [10.0, 20.0, 30.0])
    assert two[4] == f"{d.mean:+.2f} [{d.low:.2f}, {d.high:.2f}]".replace("-", "−") == "+5.00 [−7.42, 17.42]"
    # FedCoMed+ finished seeds 0 and 1 only: the difference pairs those two, not FedAvg's three
    d = paired_interval([20.0, 30.0], [-10.0, 0.0])
    assert two[7].rstrip(" |") == f"{d.mean:+.2f} [{d.low:.2f}, {d.high:.2f}]".replace("-", "−")
    assert lines[3].startswith("| ∞ | 0 | ") and len(lines) == 4
