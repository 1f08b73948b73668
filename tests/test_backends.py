"""The backend protocol: every backend implements every method itself (a method it lacked
would otherwise fall back to another backend's or raise deep in a kernel), and the context
a kernel gets carries what varies per instance and per call."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest
import torch

import rankstream
from rankstream.core import backends
from rankstream.core.backends import OPS_METHODS, Context, Ops, Runtime, Workspace, read_back
from rankstream.core.backends.numpy import NumpyOps
from rankstream.core.backends.torch import TorchOps

ROOT = Path(rankstream.__file__).parent
BACKEND_NAMES = {"numpy", "torch", "keras", "jax", "tensorflow", "mps", "cuda"}


def _keras_ops_class() -> type:
    pytest.importorskip("keras")
    from rankstream.core.backends.keras_ops import KerasOps

    return KerasOps


@pytest.mark.parametrize("get_cls", [lambda: NumpyOps, lambda: TorchOps, _keras_ops_class])
def test_every_backend_implements_every_method_itself(get_cls):
    cls = get_cls()
    missing = [m for m in OPS_METHODS if m not in vars(cls)]
    assert not missing, f"{cls.__name__} lacks {missing}"
    for name in OPS_METHODS:
        assert getattr(cls, name) is not getattr(Ops, name)
    assert cls.xp is not None


def test_the_abstract_protocol_raises_naming_the_method():
    with pytest.raises(NotImplementedError, match=r"Ops\.topk"):
        Ops().topk(np.zeros((1, 2)), 1)


@pytest.mark.parametrize("ops", [NumpyOps(), TorchOps()])
def test_backends_agree_on_every_counting_pass(ops):
    rng = np.random.default_rng(0)
    s = rng.integers(0, 5, size=(6, 9)).astype(np.float64)
    s[1, 2] = np.nan
    t = s[:, 0].copy()
    keep = rng.random((6, 9)) < 0.7
    conv = (lambda a: torch.from_numpy(np.asarray(a))) if ops.name == "torch" else np.asarray
    ws = Workspace()
    gt, ge = ops.compare_counts(conv(s), conv(t), ops.acc_dtype(conv(s)), (True, True), ws)
    # independent: python loops over the rows
    want_gt = [sum(1 for v in row if v > t[i]) for i, row in enumerate(s)]
    want_ge = [sum(1 for v in row if v >= t[i]) for i, row in enumerate(s)]
    assert ops.to_numpy(gt).tolist() == want_gt
    assert ops.to_numpy(ge).tolist() == want_ge
    assert (
        ops.to_numpy(ops.row_count(conv(keep), ops.acc_dtype(conv(s)), ws)).tolist() == keep.sum(1).tolist()
    )
    ex = ops.to_numpy(ops.exclude(conv(s), conv(keep), None, ws))
    assert np.array_equal(np.where(keep, s, -np.inf), ex, equal_nan=True)
    lab = np.nan_to_num(s)  # labels are checked finite before they are counted
    n_rel = ops.count_relevant(conv(lab), 2.0, False, conv(keep), ops.acc_dtype(conv(s)), ws)
    assert ops.to_numpy(n_rel).tolist() == [
        sum(1 for v, k in zip(r, m, strict=True) if k and v >= 2) for r, m in zip(lab, keep, strict=True)
    ]


def test_two_runtimes_never_share_a_buffer_or_a_generator():
    a, b = Runtime(random_ties=True, seed=3), Runtime(random_ties=True, seed=3)
    x = torch.zeros(2, 5)
    ca, cb = a.context(x), b.context(x)
    assert ca.workspace is not cb.workspace
    assert ca.generator is not cb.generator
    assert torch.equal(torch.randperm(9, generator=ca.generator), torch.randperm(9, generator=cb.generator))
    assert a.context(x).generator is ca.generator  # one stream per instance


def test_read_back_switches_the_path_through_the_context():
    x = np.zeros((2, 3))
    assert Context.of(x).read_back
    with read_back(False):
        assert not Context.of(x).read_back
        assert not Runtime().context(torch.zeros(2, 3)).read_back
    assert Runtime().context(x).read_back


def test_no_backend_names_framework_imports_or_hooks_outside_the_backends():
    """Kernels, ranking, inputs and state never name a backend nor import a framework."""
    core = ROOT / "core"
    files = [p for p in core.rglob("*.py") if "backends" not in p.parts]
    for path in files:
        source = path.read_text()
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for name in names:
                    assert name.split(".")[0] not in {"torch", "keras", "jax", "tensorflow", "ignite"}, path
            if isinstance(node, ast.Compare):
                consts = [c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
                assert not set(consts) & BACKEND_NAMES, f"{path}:{node.lineno} branches on a backend"
        for hook in ("FORCE_NO_READ", "_cache", "threading"):
            assert hook not in source, f"{path} holds {hook}"
    assert inspect.getsource(backends).count("import torch") == 0


def test_functional_forms_take_their_kernels_arguments_and_defaults():
    from dataclasses import fields

    from rankstream import MAPKernel, NDCGKernel, map_at_k, ndcg_at_k
    from rankstream.core.lists.base import ListConventions

    for fn, kernel in ((map_at_k, MAPKernel), (ndcg_at_k, NDCGKernel)):
        params = inspect.signature(fn).parameters
        own = inspect.signature(kernel.__init__).parameters
        for name, p in own.items():
            if name not in ("self", "top_k", "conventions"):
                assert params[name].default == p.default, (fn.__name__, name)
        for f in fields(ListConventions):
            want = own[f.name].default if f.name in own else f.default
            assert params[f.name].default == want, (fn.__name__, f.name)
        assert params["k"].default == own["top_k"].default
