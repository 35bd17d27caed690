"""Metrics under SecAgg+ (issue 49, "only party-averaged metrics leave a party"): each party's evaluation rows
become one masked vector, and its training metrics ride after its model, so the server decodes the means, counts
and verdicts a plain averaged run publishes, within the protocol's quantisation, without ever holding a party's
metric."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

pytest.importorskip("flwr")

from flower_loopback import LoopbackGrid  # noqa: E402
from flwr.app import Message  # noqa: E402
from test_flower_disclosure import config_file  # noqa: E402
from test_flower_engine import FAST  # noqa: E402
from test_flower_secure import AppGrid, app_grid  # noqa: E402

from portfed.experiment.config import load_config  # noqa: E402
from portfed.experiment.party import initial_parameters  # noqa: E402
from portfed.experiment.reports.disclosure import CLIPPED_COLUMN, mean_metrics  # noqa: E402
from portfed.experiment.reports.tables import assess_collapse, collapse_rule  # noqa: E402
from portfed.experiment.reports.tearsheets import write_report  # noqa: E402
from portfed.federation import CohortPlan  # noqa: E402
from portfed.flower import secure_metrics  # noqa: E402
from portfed.flower.cohort import FlowerCohort  # noqa: E402
from portfed.flower.node import MetricsReply, PartyNode, config_digest  # noqa: E402
from portfed.flower.nodes import NodeMap  # noqa: E402
from portfed.flower.secure import SecAggSettings  # noqa: E402
from portfed.flower.secure_metrics import (  # noqa: E402
    METRICS,
    REQUEST_RECORD,
    TRAINING_SIZE,
    VALUE_RANGE,
    EvaluationLayout,
    decode,
    decode_training,
    encode,
    encode_training,
    requested,
)
from portfed.flower.server import check_secure_run, serve  # noqa: E402
from portfed.flower.wire import WireError  # noqa: E402

ROOT = Path(__file__).parents[1]
LAYOUT = EvaluationLayout(("fedavg",), ("UCRP",), all_cash_weight=0.99)


def row(strategy: str, party: int, value: float, cash: float = 0.2, failed: str = "") -> dict[str, object]:
    metrics = dict.fromkeys(METRICS, float("nan") if failed else value) | ({} if failed else {"mean_cash": cash})
    return {"strategy": strategy, "party": party, "hindsight": False, **metrics, "failed": failed, "benchmark": "UCRP"}


def replies() -> list[MetricsReply]:
    """Three parties: one fails, one holds cash, one has a NaN information ratio and a Calmar ratio of 1e3."""
    agents = [row("fedavg", 0, 0.31, cash=0.995), row("fedavg", 1, -0.12), row("fedavg", 2, 0.0, failed="blew up")]
    agents[1] |= {"information_ratio": float("nan"), "calmar": 1e3}
    return [MetricsReply({"fedavg": a}, [row("UCRP", k, 0.05 * (k + 1))], 40, "d") for k, a in enumerate(agents)]


def test_the_sums_give_a_per_party_runs_means_counts_and_verdicts() -> None:
    parties = replies()
    vectors = [encode(r, LAYOUT) for r in parties]
    assert all(v.shape == (LAYOUT.size,) and np.abs(v).max() <= 1 for v in vectors)
    summed = decode(np.sum(vectors, axis=0), 3, LAYOUT, {"fedavg": False, "UCRP": False}, "UCRP")
    rows = pd.DataFrame([r for p in parties for r in p.runs.values()] + [r for p in parties for r in p.baselines])
    expected = mean_metrics(rows, 40)
    published = summed.means.drop(columns=[CLIPPED_COLUMN])
    clipped = published["calmar"].iloc[0]
    assert clipped == pytest.approx((0.31 + VALUE_RANGE) / 2)  # 1e3 is carried as R = 32, and counted
    assert summed.means[CLIPPED_COLUMN].tolist() == [1, 0]
    expected.loc[0, "calmar"] = clipped
    pd.testing.assert_frame_equal(published, expected, check_exact=False, rtol=0, atol=1e-12)
    assert math.isclose(published["information_ratio"].iloc[0], 0.31)  # NaN left out, as pandas' mean does
    assert summed.days == 40 and summed.all_cash == {"fedavg": 1}
    rule = collapse_rule(load_config(ROOT / "configs" / "tiny.yaml"))
    anonymous, per_party = (assess_collapse(pd.DataFrame({"train_reward": [0.0], "aggregation_change_mean": [0.0]}),
                                            frame[frame["strategy"] == "fedavg"], rule)
                            for frame in (summed.outcomes(), rows))
    assert (anonymous.kind, len(anonymous.all_cash), len(anonymous.failed)) == ("non_finite", 1, 1)
    assert (per_party.kind, len(per_party.all_cash), len(per_party.failed)) == ("non_finite", 1, 1)


def test_a_party_with_other_strategies_or_too_many_days_is_refused() -> None:
    reply = replies()[0]
    with pytest.raises(ValueError, match=r"asks for \['fedavg', 'BCRP'\]"):
        encode(reply, EvaluationLayout(("fedavg",), ("BCRP",), 0.99))
    with pytest.raises(ValueError, match="16384 held-out days"):
        encode(MetricsReply(reply.runs, reply.baselines, 16384, "d"), LAYOUT)


def test_training_metrics_sum_to_their_mean_over_the_parties_that_have_them() -> None:
    parties = [(-0.01, 0.02, 0.3), (0.03, float("nan"), 0.5), (float("nan"), 100.0, 0.1)]
    sums = np.sum([encode_training(*p) for p in parties], axis=0)
    assert sums.shape == (TRAINING_SIZE,) and all(np.abs(encode_training(*p)).max() <= 1 for p in parties)
    reward, loss, cash = decode_training(sums)
    assert reward == pytest.approx(0.01) and cash == pytest.approx(0.3)
    assert loss == pytest.approx((0.02 + VALUE_RANGE) / 2)  # a loss of 100 is carried as R = 32 (and logged)
    assert all(math.isnan(v) for v in decode_training(np.zeros(TRAINING_SIZE)))


def test_sums_that_are_not_whole_counts_are_refused() -> None:
    sums = np.sum([encode(r, LAYOUT) for r in replies()], axis=0)
    sums[1] += 0.5  # a 'present' count of 2.5
    with pytest.raises(ValueError, match="not whole numbers"):
        decode(sums, 3, LAYOUT, {"fedavg": False, "UCRP": False}, "UCRP")


class WatchedGrid(AppGrid):
    """An :class:`AppGrid` that keeps every reply the server pulls."""

    seen: list[Message]

    def pull_messages(self, message_ids: list[str]) -> list:  # type: ignore[override]
        replies = super().pull_messages(message_ids)
        self.__dict__.setdefault("seen", []).extend(replies)
        return replies


def test_a_secure_averaged_deployment_publishes_the_plain_means_and_never_receives_a_row(tmp_path: Path) -> None:
    path = config_file(tmp_path, "averaged")
    config = load_config(path)
    plain = LoopbackGrid({1000 + 7 * k: PartyNode(config, k, tmp_path / f"plain_{k}") for k in range(3)})
    serve(plain, str(path), str(tmp_path / "plain"), settings=FAST)
    grid = app_grid(path, tmp_path / "secure_nodes")
    grid.__class__ = WatchedGrid
    settings = SecAggSettings()
    serve(grid, str(path), str(tmp_path / "secure"), settings=FAST, secure=settings)
    fields = {name for reply in grid.seen for record in reply.content.config_records.values() for name in record}
    assert not fields & {*METRICS, "reward", "loss", "cash"}, fields & {*METRICS, "reward", "loss", "cash"}
    assert not any("metrics_index" in r.content.config_records for r in grid.seen)
    counts = [dict(r.content.metric_records[name]) for r in grid.seen for name in r.content.metric_records]
    assert {name for r in grid.seen for name in r.content.metric_records} == {"fitres.num_examples"}
    assert all(c == {"num_examples": 1} for c in counts)  # Flower's FitRes weight, the same for every party
    means = {d: pd.read_csv(tmp_path / d / "mean_metrics.csv") for d in ("plain", "secure")}
    assert means["secure"][CLIPPED_COLUMN].tolist() == [0, 0, 0]
    secure = means["secure"].drop(columns=[CLIPPED_COLUMN])
    # the training rounds' quantisation (< 2Δ on the models, test_flower_secure) moves the deployed models a little,
    # and the evaluation's own error is below (n / Σp) R 2/Q = 3.8e-6 per metric (measured: 3.2e-6 in all)
    pd.testing.assert_frame_equal(secure, means["plain"], check_exact=False, rtol=0, atol=1e-5)
    tables = {d: pd.read_csv(tmp_path / d / "table1.csv", index_col="Strategy") for d in ("plain", "secure")}
    pd.testing.assert_frame_equal(tables["secure"], tables["plain"], check_exact=False, rtol=0, atol=1e-5)
    assert not (tmp_path / "secure" / "party_metrics.csv").exists()
    summary = write_report(tmp_path / "secure")["summary"].read_text()
    assert "Values clipped" in summary and "Per-party results were withheld" in summary
    rounds = {d: pd.read_csv(tmp_path / d / "fedavg" / "rounds.csv") for d in ("plain", "secure")}
    for metric in ("train_reward", "train_loss", "train_cash"):  # every party's row: the mean over parties
        means = rounds["plain"].groupby("round")[metric].mean()
        np.testing.assert_allclose(rounds["secure"][metric], means.loc[rounds["secure"]["round"]], rtol=0, atol=1e-5)


class EvaluationFailsGrid(AppGrid):
    """An :class:`AppGrid` whose first node fails at the secure evaluation's masked-vector stage only."""

    def push_messages(self, messages: list[Message]) -> list[str]:
        first = next(iter(self.contexts))
        self.fail = {first: "collect_masked_vectors"} if any(
            REQUEST_RECORD in m.content.config_records for m in messages) else {}
        return super().push_messages(messages)


def test_a_party_missing_from_the_secure_metrics_stops_the_comparison(tmp_path: Path) -> None:
    path = config_file(tmp_path, "averaged")
    grid = app_grid(path, tmp_path / "nodes")
    grid.__class__ = EvaluationFailsGrid
    with pytest.raises(RuntimeError, match=r"secure evaluate: parties missing from the sum \(party 0: SecAgg\+ "
                                           "collect_masked_vectors"):
        serve(grid, str(path), str(tmp_path / "out"), settings=FAST, secure=SecAggSettings())
    assert not (tmp_path / "out" / "table1.csv").exists()
    serve(app_grid(path, tmp_path / "nodes"), str(path), str(tmp_path / "out"), settings=FAST, secure=SecAggSettings(),
          resume=True)  # as the error says: the training is checkpointed, the nodes fixed, the run resumed
    assert pd.read_csv(tmp_path / "out" / "mean_metrics.csv")["parties"].tolist() == [3, 3, 3]


def test_a_plain_train_message_is_not_a_secure_metrics_request() -> None:
    from flwr.app import ConfigRecord, RecordDict

    assert requested(RecordDict({"scalars": ConfigRecord({"run": "ab"})})) is None
    content = LAYOUT.mark(RecordDict())
    assert requested(content) == LAYOUT
    content[REQUEST_RECORD] = ConfigRecord({**content[REQUEST_RECORD], "all_cash_weight": 2.0})
    with pytest.raises(WireError, match="all_cash_weight"):
        requested(content)


def test_a_party_lying_in_its_training_metrics_coordinates_costs_the_rounds_metrics_not_the_round(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    path = config_file(tmp_path, "averaged")
    config = load_config(path)
    honest = secure_metrics.encode_training

    def lying(reward: float, loss: float, cash: float) -> np.ndarray:
        out = honest(reward, loss, cash)
        out[1] = 0.5  # 'present' is 0 or 1
        return out

    monkeypatch.setattr(secure_metrics, "encode_training", lying)
    grid = app_grid(path, tmp_path / "nodes")
    node_map = NodeMap(grid, 3, config_digest(config), FAST, known={k: 1000 + 7 * k for k in range(3)})  # type: ignore[arg-type]
    d = initial_parameters(config).shape[-1]
    result = FlowerCohort(grid, node_map, d, "ab" * 8, FAST, SecAggSettings(), summed_metrics=True).train(  # type: ignore[arg-type]
        CohortPlan(round_index=0, parties=np.arange(3), steps=3, start=np.tile(initial_parameters(config), (3, 1))))
    assert not result.rejected and np.isfinite(result.params).all()
    assert all(np.isnan(m).all() for m in (result.train_reward, result.train_loss, result.train_cash))
    assert "summed training metrics are unusable" in caplog.text


def test_more_parties_than_one_secure_round_sums_are_refused_before_training(tmp_path: Path) -> None:
    raw = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    raw["parties"]["count"] = 256
    raw["federation"].update({"algorithms": ["fedavg"], "parties_per_round": 10})
    path = tmp_path / "many.yaml"
    for disclosure, refused in (("per_party", False), ("averaged", True)):
        raw["evaluation"]["disclosure"] = disclosure
        path.write_text(yaml.safe_dump(raw))
        if refused:
            with pytest.raises(ValueError, match="every party's evaluation in one round: at most 255 parties, the config has 256"):
                check_secure_run(load_config(path), ["fedavg"])
        else:
            check_secure_run(load_config(path), ["fedavg"])  # ten a round: each training round sums ten
