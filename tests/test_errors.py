"""Bad input: clear errors naming the argument; a failed update leaves the state as it was."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rankstream import MAPKernel, NDCGKernel, State, map_at_k
from rankstream.ignite import MAP, NDCG

# every test on both paths of a CPU torch batch (numpy views and torch itself)
pytestmark = pytest.mark.usefixtures("list_path")


@pytest.mark.parametrize("cls", [MAP, NDCG])
@pytest.mark.parametrize("bad", [0, -3, [], [1, 0], "5", 2.5, [1, 2.0], True, None])
def test_top_k_must_be_positive_ints(cls, bad):
    with pytest.raises(ValueError, match="top_k") as info:
        cls(top_k=bad)
    assert repr(bad) in str(info.value)


def test_other_constructor_arguments_are_checked():
    with pytest.raises(ValueError, match="denominator"):
        MAP(denominator="max")
    with pytest.raises(ValueError, match="ties"):
        MAP(ties="last")
    with pytest.raises(ValueError, match="gain"):
        NDCG(gain_function="cubic")
    with pytest.raises(TypeError, match="gain"):
        NDCG(gain_function=3)
    with pytest.raises(TypeError, match="discount"):
        NDCG(discount="log")
    with pytest.raises(ValueError, match="relevance_threshold"):
        MAP(relevance_threshold=0.0)
    with pytest.raises(ValueError, match="relevance_threshold"):
        NDCG(relevance_threshold=-1.0)
    with pytest.raises(ValueError, match="empty"):
        MAPKernel(3, empty="nan")


S = torch.rand(3, 5)
Y = (torch.rand(3, 5) < 0.5).float()

BAD_OUTPUTS = [
    ((S,), ValueError, "length 1"),
    ((S, Y, {}, 1), ValueError, "length 4"),
    ((S, Y, [1]), TypeError, "third element"),
    ((S, Y, {"weights": 1}), ValueError, "unknown keys"),
    ({"y_pred": S}, ValueError, "missing"),
    ({"y_pred": S, "y": Y, "w": 1}, ValueError, "unknown keys"),
    ("scores", TypeError, "output must be"),
    ((S[0], Y[0]), ValueError, r"y_pred must be 2-D .* got shape \(5,\)"),
    ((S[None], Y[None]), ValueError, r"2-D .*\(1, 3, 5\)"),
    ((S, Y[:, :4]), ValueError, r"same shape.*\(3, 5\).*\(3, 4\)"),
    ((S > 0.5, Y), TypeError, "y_pred must hold real scores"),
    ((S, Y, {"mask": torch.ones(3, 4, dtype=torch.bool)}), ValueError, r"mask must have the shape.*\(3, 4\)"),
    ((S, Y, {"mask": torch.ones(3, 5)}), TypeError, "mask must be a bool"),
    ((S, Y, {"sample_weight": torch.ones(4)}), ValueError, r"sample_weight .*\(3,\).*\(4,\)"),
    ((S, Y, {"sample_weight": torch.ones(3, 5)}), ValueError, r"sample_weight .*\(3, 5\)"),
    ((S, Y, {"sample_weight": torch.tensor([1.0, -1.0, 1.0])}), ValueError, "non-negative"),
    ((S, Y, {"sample_weight": torch.tensor([1.0, float("nan"), 1.0])}), ValueError, "finite"),
    ((torch.tensor([[0.1, float("nan"), 0.3]]), torch.tensor([[1.0, 0.0, 0.0]])), ValueError, "NaN"),
]


@pytest.mark.parametrize("cls", [MAP, NDCG])
@pytest.mark.parametrize("output, exc, pattern", BAD_OUTPUTS)
def test_bad_update_raises_and_leaves_state_untouched(cls, output, exc, pattern):
    metric = cls(top_k=[1, 3])
    metric.update((torch.tensor([[3.0, 2.0, 1.0]]), torch.tensor([[0.0, 1.0, 1.0]])))
    before = metric._sums.clone()
    with pytest.raises(exc, match=pattern):
        metric.update(output)
    assert torch.equal(metric._sums, before)
    # ...and the metric keeps working.
    metric.update((torch.tensor([[3.0, 2.0, 1.0]]), torch.tensor([[1.0, 0.0, 0.0]])))


def test_nan_in_a_masked_item_is_fine():
    s = torch.tensor([[0.1, float("nan"), 0.3]])
    y = torch.tensor([[1.0, 0.0, 0.0]])
    m = torch.tensor([[True, False, True]])
    metric = MAP(top_k=2)
    metric.update((s, y, {"mask": m}))
    assert metric.compute() == [0.5]


def test_core_state_update_failure_leaves_state_untouched():
    st = State(NDCGKernel(2))
    st.update(np.array([[1.0, 2.0]]), np.array([[1.0, 0.0]]))
    before = st.state_dict()["sums"]
    with pytest.raises(ValueError, match="NaN"):
        st.update(np.array([[np.nan, 2.0]]), np.array([[1.0, 0.0]]))
    assert all(np.array_equal(before[k], v) for k, v in st.state_dict()["sums"].items())


def test_state_load_and_merge_are_checked():
    st = State(MAPKernel([1, 2]))
    with pytest.raises(ValueError, match="missing fields"):
        st.load({"value_sum": np.zeros(2)})
    with pytest.raises(ValueError, match="shape"):
        st.load({"value_sum": np.zeros(3), "weight_sum": 0.0, "count": 0.0, "invalid": 0.0})
    with pytest.raises(ValueError, match="different fields"):
        st.merge(State(MAPKernel([1])))


def test_functional_shapes_and_backends():
    s = np.array([[4.0, 2.0, 3.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    y = np.array([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    out = map_at_k(s, y, 2)
    assert isinstance(out, np.ndarray) and out.shape == (2,)
    # AP@2: list 0 ranks items 0, 2 -> one hit at rank 2 -> (1/2) / 2; list 1 hit at rank 1.
    assert out.tolist() == [0.25, 1.0]
    tout = map_at_k(torch.from_numpy(s), torch.from_numpy(y), [1, 2])
    assert isinstance(tout, torch.Tensor) and tout.shape == (2, 2)
    assert tout[:, 1].tolist() == [0.25, 1.0]
