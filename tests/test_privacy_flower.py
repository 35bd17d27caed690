"""Differential privacy on the Flower engine, on the loopback grid of tests/flower_loopback.py: central DP in the
round loop both engines share, local DP on the nodes — with the in-process noise (``dp-noise=run``) the same noisy
runs as in-process, by default noise seeded by each node's secret key — and the server never receives a party's
own model; with SecAgg+ the server learns only the mean of the noisy messages."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

pytest.importorskip("flwr")

from flower_loopback import LoopbackGrid  # noqa: E402
from flwr.app import Array, ArrayRecord, RecordDict  # noqa: E402

from portfed.deploy import RunDirectoryError, load_trained_party  # noqa: E402
from portfed.experiment.config import load_config  # noqa: E402
from portfed.experiment.party import Party, initial_parameters  # noqa: E402
from portfed.experiment.runs import run_fingerprint  # noqa: E402
from portfed.experiment.studies import compare  # noqa: E402
from portfed.federation import CohortPlan, LocalObjective  # noqa: E402
from portfed.flower import wire  # noqa: E402
from portfed.flower.launch import Launch  # noqa: E402
from portfed.flower.node import OwnDeployment, PartyNode  # noqa: E402
from portfed.flower.nodes import FlowerSettings  # noqa: E402
from portfed.flower.secure import SecAggSettings  # noqa: E402
from portfed.flower.server import check_private_run, serve  # noqa: E402
from portfed.privacy.mechanism import local_messages  # noqa: E402

ROOT = Path(__file__).parents[1]
FAST = FlowerSettings(poll_interval=0.001, reply_timeout=1.0, query_timeout=1.0, join_timeout=1.0)
#: One-party engines on the nodes, one K-party engine in process: float32 round-off apart (test_flower_engine).
ROUND_OFF = {"atol": 1e-6, "rtol": 0}
CLIP, Z = 0.5, 1.0


def private_config(tmp_path: Path, mode: str, algorithm: str, **federation: object) -> Path:
    raw = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    raw["federation"].update({"rounds": 2, "local_steps": 3, "algorithms": [algorithm], "checkpoint_every": 2,
                              **federation})
    raw["diagnostics"]["interpolation_rounds"] = []
    raw["privacy"] = {"clip": CLIP, "noise_multiplier": Z, "mode": mode}
    path = tmp_path / "private.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def party_nodes(path: Path, root: Path, noise: str = "run") -> dict[int, PartyNode]:
    """The parties' nodes; with the in-process run's noise (``run``) unless told otherwise, to compare the engines."""
    config = load_config(path)
    return {1000 + k: PartyNode(config, k, root / f"node_{k}", noise) for k in range(config.parties.count)}


def test_a_central_private_flower_run_equals_the_private_in_process_run(tmp_path: Path) -> None:
    path = private_config(tmp_path, "central", "fedavg")
    config = load_config(path)
    compare(config, tmp_path / "in_process", progress=False, n_jobs=1)
    serve(LoopbackGrid(party_nodes(path, tmp_path)), str(path), str(tmp_path / "flower"), settings=FAST)
    a = np.load(tmp_path / "in_process" / "fedavg" / "models.npz")
    b = np.load(tmp_path / "flower" / "fedavg" / "models.npz")
    for key in ("party_models", "global_model", "deployed"):
        np.testing.assert_allclose(a[key], b[key], err_msg=key, **ROUND_OFF)
    rounds = pd.read_csv(tmp_path / "flower" / "fedavg" / "rounds.csv")
    assert rounds["epsilon"].tolist() == pd.read_csv(tmp_path / "in_process" / "fedavg" / "rounds.csv")["epsilon"].tolist()
    assert (rounds["epsilon"] > 0).all()
    # the noise reached the model: a run without privacy ends elsewhere
    raw = yaml.safe_load(path.read_text())
    del raw["privacy"]
    path.write_text(yaml.safe_dump(raw))
    compare(load_config(path), tmp_path / "plain", progress=False, n_jobs=1)
    plain = np.load(tmp_path / "plain" / "fedavg" / "models.npz")["global_model"]
    assert not np.allclose(plain, a["global_model"], atol=1e-3)


@pytest.mark.parametrize("algorithm", ["fedavg", "fedavg+", "fedamp"])
def test_local_dp_on_flower_is_drawn_on_the_nodes_and_equals_the_in_process_run(tmp_path: Path, algorithm: str) -> None:
    path = private_config(tmp_path, "local", algorithm)
    config = load_config(path)
    compare(config, tmp_path / "in_process", progress=False, n_jobs=1)
    grid = LoopbackGrid(party_nodes(path, tmp_path))
    serve(grid, str(path), str(tmp_path / "flower"), settings=FAST)
    a = np.load(tmp_path / "in_process" / algorithm / "models.npz")
    b = np.load(tmp_path / "flower" / algorithm / "models.npz")
    np.testing.assert_allclose(a["global_model"], b["global_model"], **ROUND_OFF)
    run = run_fingerprint(config, algorithm)
    for node in grid.nodes.values():  # every party trained and deployed its own model, as in process
        k = node.index
        np.testing.assert_allclose(node.own_model(*node.party_before(run, 2)), a["party_models"][k], **ROUND_OFF)
        deployed = np.load(node.deployed_dir / algorithm / f"party_{k}.npz")["deployed"]
        np.testing.assert_allclose(deployed, a["deployed"][k], **ROUND_OFF)
    # the server's copies are the noisy messages, never the parties' models, and it has no deployed model to offer
    assert np.abs(b["party_models"] - a["party_models"]).max(axis=1).min() > 0.1
    assert "deployed" not in b.files
    with pytest.raises(RunDirectoryError, match="holds no deployed models: its parties deployed their own"):
        load_trained_party(tmp_path / "flower", algorithm, 0)
    metrics = [pd.read_csv(tmp_path / run_dir / algorithm / "party_metrics.csv") for run_dir in ("in_process", "flower")]
    numeric = metrics[0].select_dtypes("number").columns
    np.testing.assert_allclose(metrics[1][numeric], metrics[0][numeric], rtol=1e-4, atol=1e-6)
    epsilons = [pd.read_csv(tmp_path / run_dir / algorithm / "rounds.csv")["epsilon"] for run_dir in ("in_process", "flower")]
    assert epsilons[0].tolist() == epsilons[1].tolist() and (epsilons[1] > 0).all()

    # What the server received: r_k + clip_S(w_k − r_k) + the party's noise of (seed, round, party), never w_k.
    trains = [(node, wire.decode_private_train(sent), wire.decode_train_reply(reply).params)
              for node, kind, sent, reply in grid.exchanged if kind == wire.TRAIN]
    assert len(trains) == 2 * config.parties.count
    for node_id, (scalars, reference), received in trains:
        node, t = grid.nodes[node_id], int(scalars["round"])  # type: ignore[call-overload]
        own = node.own_model(*node.party_before(run, t + 1))
        assert np.abs(received - own).max() > 0.1
        expected = local_messages(own[None], reference[None], np.array([node.index]), config.privacy_settings(),  # type: ignore[arg-type]
                                  config.seed, t)[0]
        np.testing.assert_array_equal(received, expected)
    for _, kind, sent, _ in grid.exchanged:  # nor a deployed model made from the noisy copies at evaluation
        if kind == wire.EVALUATE:
            assert isinstance(wire.decode_evaluate(sent)[0][algorithm][0], OwnDeployment)


def test_secure_aggregation_with_local_noise_sums_the_noisy_messages_once(tmp_path: Path) -> None:
    from test_flower_secure import app_grid

    path = private_config(tmp_path, "local", "fedavg", rounds=1)
    config = load_config(path)
    settings = SecAggSettings()
    serve(app_grid(path, tmp_path / "secure", **{"dp-noise": "run"}), str(path), str(tmp_path / "flower"),
          settings=FAST, secure=settings)
    compare(config, tmp_path / "in_process", progress=False, n_jobs=1)
    run, reference = run_fingerprint(config, "fedavg"), initial_parameters(config)
    nodes = [PartyNode(config, k, tmp_path / "secure" / f"node_{k}") for k in range(3)]
    own = np.stack([node.own_model(*node.party_before(run, 1)) for node in nodes])
    noisy = local_messages(own, reference, np.arange(3), config.privacy_settings(), config.seed, 0)  # type: ignore[arg-type]
    secure_mean = np.load(tmp_path / "flower" / "fedavg" / "models.npz")["global_model"]
    error = np.abs(secure_mean - noisy.mean(axis=0)).max()
    assert 0 < error < settings.step, error  # the mean of the noisy messages, quantised: noised once, on the nodes
    assert np.abs(secure_mean - own.mean(axis=0)).max() > 0.1  # the noise is in it
    in_process = np.load(tmp_path / "in_process" / "fedavg" / "models.npz")["global_model"]
    np.testing.assert_allclose(secure_mean, in_process, rtol=0, atol=settings.step + ROUND_OFF["atol"])


def test_local_dp_on_flower_refuses_what_parties_cannot_make_from_their_own_models(tmp_path: Path) -> None:
    path = private_config(tmp_path, "local", "ditto")
    with pytest.raises(ValueError, match="privacy.mode local on Flower refuses 'ditto': its personal models live on "
                                         "the server"):
        Launch(path, tmp_path / "out")
    with pytest.raises(ValueError, match="refuses 'fedavg-ft'"):
        serve(LoopbackGrid(party_nodes(path, tmp_path)), str(path), str(tmp_path / "out"), ["fedavg-ft"],
              settings=FAST)
    assert not (tmp_path / "out").exists()
    loud = private_config(tmp_path, "local", "fedavg")
    config = load_config(loud)
    check_private_run(config, ["fedavg", "fedamp", "fedcomed+"], SecAggSettings())
    with pytest.raises(ValueError, match="outside the clipping range ±0.5 .* raise --secagg-clipping-range"):
        check_private_run(config, ["fedavg"], SecAggSettings(clipping_range=0.5))


def test_a_local_dp_node_refuses_a_plan_a_deployed_model_and_a_node_without_it_a_reference(tmp_path: Path) -> None:
    private = PartyNode(load_config(private_config(tmp_path, "local", "fedavg")), 0, tmp_path / "a")
    d = initial_parameters(private.config).shape[-1]
    with pytest.raises(ValueError, match="privacy.mode local, so it plans its own round"):
        private.train("ab" * 8, 0, np.zeros(d), 1, LocalObjective())
    with pytest.raises(ValueError, match="deploys its own model of 'fedavg'"):
        private.evaluate({"fedavg": (np.zeros(d), {})})
    with pytest.raises(ValueError, match="ditto.* keeps each party's personal state on the server"):
        private.train_private("ab" * 8, 0, "ditto", np.zeros(d), 1)
    central = PartyNode(load_config(private_config(tmp_path, "central", "fedavg")), 0, tmp_path / "b")
    with pytest.raises(ValueError, match="has no privacy.mode local"):
        central.train_private("ab" * 8, 0, "fedavg", np.zeros(d), 1)
    assert private.digest != central.digest  # the privacy section is in a local-DP node's digest


def test_a_private_train_message_carries_the_reference_only_and_is_checked_field_by_field(tmp_path: Path) -> None:
    d = 5
    plan = CohortPlan(round_index=3, parties=np.array([2, 4]), steps=7, start=np.ones((2, d)),
                      target=np.zeros((2, d)), sigma=np.full(2, 0.5), references=np.arange(2.0 * d).reshape(2, d))
    content = wire.encode_private_train(plan, 1, "ab" * 8, 2, "fedavg+")
    assert set(content.array_records["plan"]) == {"reference"}  # no start, target or weights of the server's
    scalars, reference = wire.decode_private_train(content)
    assert scalars == {"run": "ab" * 8, "round": 3, "party": 4, "steps": 7, "committed": 2, "algorithm": "fedavg+"}
    np.testing.assert_array_equal(reference, plan.references[1])  # type: ignore[index]
    with pytest.raises(wire.WireError, match="carries the array reference only, got \\['reference', 'start'\\]"):
        wire.decode_private_train(RecordDict({**content, "plan": ArrayRecord(
            {"reference": Array(np.zeros(d)), "start": Array(np.zeros(d))})}))
    content["scalars"]["algorithm"] = 3
    with pytest.raises(wire.WireError, match="algorithm must be a string"):
        wire.decode_private_train(content)
    with pytest.raises(wire.WireError, match="unknown arrays \\['reference'\\]"):  # a node without local DP
        wire.decode_train(wire.encode_private_train(plan, 0, "ab" * 8, 0, "fedavg"))
    with pytest.raises(ValueError, match="needs the plan's references"):
        wire.encode_private_train(CohortPlan(round_index=0, parties=np.array([0]), steps=1, start=np.ones((1, d))),
                                  0, "ab" * 8, 0, "fedavg")
    node = PartyNode(load_config(private_config(tmp_path, "local", "fedavg")), 0, tmp_path / "n")
    with pytest.raises(ValueError, match="names algorithm '../x', which is not one of portfed's"):
        node.train_private("ab" * 8, 0, "../x", np.zeros(d), 1)


def test_fedavg_plus_is_secure_when_the_parties_make_their_own_rounds(tmp_path: Path) -> None:
    """FedAvg+'s server step is the mean; under local DP each node computes its own start and target, so SecAgg+ may
    sum its noisy messages: the run is the in-process local-DP run within the quantisation (refused without it)."""
    from test_flower_secure import app_grid

    path = private_config(tmp_path, "local", "fedavg+", rounds=1)
    config, settings = load_config(path), SecAggSettings()
    serve(app_grid(path, tmp_path / "secure", **{"dp-noise": "run"}), str(path), str(tmp_path / "flower"),
          settings=FAST, secure=settings)
    compare(config, tmp_path / "in_process", progress=False, n_jobs=1)
    secure_mean = np.load(tmp_path / "flower" / "fedavg+" / "models.npz")["global_model"]
    in_process = np.load(tmp_path / "in_process" / "fedavg+" / "models.npz")["global_model"]
    np.testing.assert_allclose(secure_mean, in_process, rtol=0, atol=settings.step + ROUND_OFF["atol"])
    raw = yaml.safe_load(path.read_text())
    raw["privacy"]["mode"] = "central"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match="refuses 'fedavg\\+': its personal targets .*; under privacy.mode local each "
                                         "node computes its own"):
        Launch(path, tmp_path / "out", secure=settings)


def test_a_node_seeds_its_noise_with_its_own_key_and_answers_a_round_once(tmp_path: Path) -> None:
    """By default the server cannot regenerate a node's noise from the config (it holds the run's seed); the node
    answers a resent round with the same message, and refuses a different request for a round it answered."""
    config = load_config(private_config(tmp_path, "local", "fedavg"))
    run, reference = "ab" * 8, initial_parameters(config)
    node = PartyNode(config, 1, tmp_path / "node")
    sent = node.train_private(run, 0, "fedavg", reference, 2).params
    own = node.own_model(*node.party_before(run, 1))
    seeded = local_messages(own[None], reference[None], np.array([1]), config.privacy_settings(), config.seed, 0)[0]  # type: ignore[arg-type]
    clipped = local_messages(own[None], reference[None], np.array([1]), replace(config.privacy_settings(),  # type: ignore[type-var]
                                                                               noise_multiplier=0.0), 0, 0)[0]
    assert np.abs(sent - seeded).max() > 0.1  # not the draw the config's seed makes
    # noise of std zS around r + clip_S(w − r): the key is random, so the bound is the sample std's own spread,
    # relative sd 1/√(2d) over the d coordinates, at 6 of them (a false alarm about once in 10^9 runs)
    assert abs(np.std(sent - clipped) / (Z * CLIP) - 1) < 6 / np.sqrt(2 * sent.size)
    key = tmp_path / "node" / "noise_key"
    assert len(key.read_bytes()) == 32 and key.stat().st_mode & 0o077 == 0
    again = PartyNode(config, 1, tmp_path / "node").train_private(run, 0, "fedavg", reference, 2).params
    np.testing.assert_array_equal(again, sent)  # a resent round: the same message, nothing new
    with pytest.raises(ValueError, match="round 0 of this run was answered for another request"):
        node.train_private(run, 0, "fedavg", reference + 0.01, 2)
    other = PartyNode(config, 1, tmp_path / "other").train_private(run, 0, "fedavg", reference, 2).params
    assert np.abs(other - sent).max() > 0.1  # another node key, other noise
    with pytest.raises(ValueError, match="dp-noise must be one of secret, run, got 'seed'"):
        PartyNode(config, 1, tmp_path / "x", "seed")


def test_a_local_dp_node_whose_training_diverged_keeps_its_previous_model(tmp_path: Path, monkeypatch) -> None:
    """As in process (finish_round keeps an unusable party's previous model): a node whose round trained a
    non-finite model replies with a non-finite message, which the server quarantines, and starts its next
    round from the model it had before."""
    config = load_config(private_config(tmp_path, "local", "fedavg"))
    run, reference = "ab" * 8, initial_parameters(config)
    node = PartyNode(config, 1, tmp_path / "node")
    node.train_private(run, 0, "fedavg", reference, 2)
    before = node.own_model(*node.party_before(run, 1))
    assert np.isfinite(before).all() and np.abs(before - reference).max() > 0  # round 0 trained a model
    train = Party.local_train

    def diverged(self, params, steps, objective=None):  # the training of round 1 blows up
        result = train(self, params, steps, objective)
        return replace(result, params=np.full_like(result.params, np.nan))

    monkeypatch.setattr(Party, "local_train", diverged)
    sent = node.train_private(run, 1, "fedavg", reference, 2).params
    assert not np.isfinite(sent).any()
    np.testing.assert_array_equal(node.own_model(*node.party_before(run, 2)), before)
