"""Paper 004's CNN as a per-party LocalTrainer: shapes, Local-Solve terms, a federated run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from portfed.federation import make_algorithm, run_rounds
from portfed.federation.cohort import LocalObjective
from portfed.supervised.build import build_data
from portfed.supervised.cnn import CNNModel, make_cnn_parties, paper_cnn
from portfed.supervised.config import ImageData
from portfed.supervised.trainers import party_stream


@pytest.fixture(scope="module")
def digits():
    return build_data(ImageData(kind="images", source="digits", partition="iid", n_parties=3,
                               fractions=(0.6, 0.2, 0.2)))


def test_mnist_shape_and_parameter_count() -> None:
    net = paper_cnn(28, 10)
    assert net(torch.zeros(2, 784, dtype=torch.float64)).shape == (2, 10)
    expected = (25 * 32 + 32) + (25 * 32 * 64 + 64) + (3136 * 512 + 512) + (512 * 10 + 10)
    assert sum(p.numel() for p in net.parameters()) == expected
    with pytest.raises(ValueError, match="divisible by 4"):
        paper_cnn(10, 10)


def test_one_step_is_sgd_with_prox_then_mix(digits) -> None:
    party = make_cnn_parties(digits, 0.05, 4, seed=0)[0]
    model = party.model
    w0 = model.init_params(np.random.default_rng(0))
    center, target = w0 + 0.01, w0 - 0.02
    batch = party_stream(0, 0).integers(0, party.data.n_train, size=(1, 4))[0]
    reference = paper_cnn(8, 10)
    torch.nn.utils.vector_to_parameters(torch.tensor(w0), reference.parameters())
    loss = torch.nn.functional.cross_entropy(reference(torch.as_tensor(party.data.x_train[batch])),
                                             torch.as_tensor(party.data.y_train[batch]))
    loss.backward()
    grad = torch.cat([p.grad.reshape(-1) for p in reference.parameters()]).numpy()
    result = party.local_train(w0, 1, LocalObjective(target=target, sigma=30.0, prox_center=center, prox_coef=3.0))
    kappa = 1.0 / (1.0 + 0.05 * 30.0)  # the party's own η = 0.05 (paper 003 eq. 14)
    expected = kappa * (w0 - 0.05 * (grad + 3.0 * (w0 - center))) + (1.0 - kappa) * target
    np.testing.assert_allclose(result.params, expected, rtol=1e-9, atol=1e-12)


def test_federated_cnn_run_learns(digits) -> None:
    parties = make_cnn_parties(digits, 0.1, 20, seed=1)
    model = CNNModel(64, 10)
    init = model.init_params(np.random.default_rng(1))
    before = np.mean([model.score(init, p.x_test, p.y_test)[1] for p in digits.parties])
    run = run_rounds(parties, make_algorithm("fedavg"), 4, 10, seed=0, init_params=init)
    after = np.mean([model.score(run.state.global_model, p.x_test, p.y_test)[1] for p in digits.parties])
    assert np.all(np.isfinite(run.state.global_model)) and after < before


def test_adam_steps_match_torch_and_keep_their_moments_across_rounds(digits) -> None:
    """Paper 004's optimizer: two local trainings of 2 Adam steps equal torch.optim.Adam's 4 steps on the
    same minibatches (the moments survive between the calls)."""
    party = make_cnn_parties(digits, 1e-3, 4, seed=0, optimizer="adam")[0]
    w0 = party.model.init_params(np.random.default_rng(0))
    batches = party_stream(0, 0).integers(0, party.data.n_train, size=(2, 2, 4))
    first = party.local_train(w0, 2, None)
    second = party.local_train(None, 2, None)
    reference = paper_cnn(8, 10)
    torch.nn.utils.vector_to_parameters(torch.tensor(w0), reference.parameters())
    adam = torch.optim.Adam(reference.parameters(), lr=1e-3)
    for index in batches.reshape(4, 4):
        adam.zero_grad()
        torch.nn.functional.cross_entropy(reference(torch.as_tensor(party.data.x_train[index])),
                                          torch.as_tensor(party.data.y_train[index])).backward()
        adam.step()
    expected = torch.nn.utils.parameters_to_vector(reference.parameters()).detach().numpy()
    assert not np.allclose(first.params, w0)
    np.testing.assert_allclose(second.params, expected, rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="written for SGD"):
        run_rounds(make_cnn_parties(digits, 1e-3, 4, seed=0, optimizer="adam"), make_algorithm("scaffold"), 1, 1,
                   seed=0, init_params=w0)
