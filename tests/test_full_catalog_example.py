"""examples/full_catalog.py at a reduced size (5,000 items, 60 users, 20 training steps): its
exact evaluation equals ListMetrics on the materialised (users, items) matrix with each user's
training items masked, and it prints what it computed."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch

from rankstream import ListMetrics, State

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import full_catalog

ARGS = ["--items", "5000", "--users", "60", "--steps", "20"]


def test_example_equals_the_materialised_matrix(capsys):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = full_catalog.main(ARGS)
        data = full_catalog.make_data(5000, 60)
        users, items = full_catalog.train(data, 20)
    finally:
        torch.set_num_threads(threads)
    scores = (users.double() @ items.double().T).numpy()
    labels = np.zeros(scores.shape)
    valid = np.ones(scores.shape, bool)
    for u, (tr, te) in enumerate(zip(data["train"], data["test"], strict=True)):
        labels[u, te] = 1.0
        valid[u, tr] = False
    ref = State(ListMetrics(["ndcg@10", "recall@100", "mrr"], confidence=0.95)).update(scores, labels, valid)
    want = ref.compute()
    assert set(result) == set(want)
    for key, value in want.items():
        assert result[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    out = capsys.readouterr().out
    assert f"ndcg@10: {want['ndcg@10']:.4f}" in out and "items scored/s" in out
