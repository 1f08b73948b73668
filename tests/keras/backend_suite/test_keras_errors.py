"""Bad input raises ValueError/TypeError naming the argument and echoing the shapes."""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.keras import MAP, NDCG


@pytest.mark.parametrize("cls", [NDCG, MAP])
@pytest.mark.parametrize("k", [0, -2, 2.5, True, "3", [3]])
def test_k_must_be_a_positive_int(cls, k):
    with pytest.raises(ValueError, match=r"k must be a positive int.*" + repr(k).replace("[", r"\[")[:2]):
        cls(k=k)


def test_other_arguments_are_checked():
    with pytest.raises(ValueError, match="gain_fn"):
        NDCG(gain_fn="cubic")
    with pytest.raises(TypeError, match="gain_fn"):
        NDCG(gain_fn=3)
    with pytest.raises(TypeError, match="rank_discount_fn"):
        NDCG(rank_discount_fn="log")
    with pytest.raises(ValueError, match="denominator"):
        MAP(denominator="max")
    with pytest.raises(ValueError, match="empty"):
        MAP(empty="drop")
    with pytest.raises(TypeError, match="seed"):
        NDCG(seed="x")


S = np.linspace(-0.4, 0.4, 12, dtype="float32").reshape(3, 4)
Y = np.array([[1, 0, 2, -1], [0, 0, 1, 1], [3, 0, 0, 0]], dtype="float32")
M = np.ones((3, 4), bool)


@pytest.mark.parametrize(
    "y_true, y_pred, weight, pattern",
    [
        (Y, S[:, :3], None, r"y_true and y_pred must have the same shape.*\(3, 4\).*\(3, 3\)"),
        (Y[None], S[None], None, r"y_true must be 1-D .* or 2-D .*got rank 3 shape \(1, 3, 4\)"),
        (Y[0], S, None, r"y_true and y_pred must have the same shape.*\(4,\).*\(3, 4\)"),
        ({"labels": Y, "mask": M[:2]}, S, None, r"mask.*\(3, 4\), got \(2, 4\)"),
        ({"mask": M}, S, None, r'y_true as a dict must have the key "labels"'),
        ({"labels": Y, "mask": M, "w": M}, S, None, r"unknown keys \['w'\]"),
        (Y, S, np.ones(4, "float32"), r"sample_weight must be .*\(batch,\) = \(3,\).*got shape \(4,\)"),
        (
            Y,
            S,
            np.ones((3, 5), "float32"),
            r"sample_weight must have the shape of y_pred .*\(3, 4\), got shape \(3, 5\)",
        ),
        (Y, S, np.ones((3, 4, 1), "float32"), r"sample_weight must have shape .* got shape \(3, 4, 1\)"),
        (
            Y[0],
            S[0],
            np.ones((1, 4), "float32"),
            r"sample_weight must have shape \(\), \(1,\) or \(list_size,\).*\(1, 4\)",
        ),
        (
            Y[0],
            S[0],
            np.ones(3, "float32"),
            r"sample_weight must have shape \(\), \(1,\) or \(list_size,\).*\(3,\)",
        ),
    ],
)
@pytest.mark.parametrize("cls", [NDCG, MAP])
def test_bad_shapes_name_the_argument(cls, y_true, y_pred, weight, pattern):
    metric = cls(k=2)
    with pytest.raises(ValueError, match=pattern):
        metric.update_state(y_true, y_pred, sample_weight=weight)
    assert float(metric.result()) == 0.0


@pytest.mark.parametrize("cls", [NDCG, MAP])
def test_nan_scores_raise(cls):
    s = S.copy()
    s[1, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        cls(k=2).update_state(Y, s)
    s = S.copy()
    s[0, 3] = np.nan  # a padding item (label -1): ignored
    metric = cls(k=2)
    metric.update_state(Y, s)
    assert np.isfinite(float(metric.result()))
