"""Every list metric's numbers from two trees of rankstream, compared (a refactoring's check).

``python benchmarks/compare_numbers.py OTHER_TREE [THIS_TREE]`` runs one fixed random grid (every
row of the list table x options (plain, ``confidence``, ``chance``, keras-rs weighting with
per-item weights, ``empty="zero"``) x tie policy (first, random with a seed, expected) x input
(numpy float64, torch float32, a large torch batch that goes in blocks of rows), plus a
``ListMetrics`` of every name) in a subprocess per tree, each importing rankstream from its tree
only, dumps the state sums and per-list values to ``.npz`` and reports the largest difference
(NaN equal to NaN; an error message must match too). Exit status 1 past ``--tol`` (1e-12).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

TIES = ({"ties": "first"}, {"ties": "random", "seed": 3}, {"ties": "expected"})
OPTIONS = (
    {},
    {"confidence": 0.9},
    {"chance": True},
    {"weighting": "keras_rs", "negative_labels": "mask"},
    {"empty": "zero"},
)


def _batch(rng: np.random.Generator, b: int, n: int) -> tuple[np.ndarray, ...]:
    scores = rng.integers(0, 4, size=(b, n)).astype(np.float64)  # exact ties
    labels = rng.integers(0, 4, size=(b, n)).astype(np.float64) * (rng.random((b, n)) < 0.4)
    mask = rng.random((b, n)) < 0.85
    mask[0] = False  # a list without an item
    labels[1] = 0.0  # a list without a relevant item
    list_w = rng.integers(1, 4, size=b).astype(np.float64)
    item_w = rng.integers(0, 3, size=(b, n)).astype(np.float64)
    return scores, labels, mask, list_w, item_w


def _flat(sums: object) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, dtype=np.float64) for k, v in dict(sums).items()}  # type: ignore[call-overload]


def produce(out: str) -> None:
    """The grid's numbers of the rankstream this process imports, into ``out`` (.npz)."""
    import torch

    import rankstream
    from rankstream.core.lists.collection import ListMetrics
    from rankstream.core.lists.table import LIST_METRICS

    print("rankstream from", rankstream.__file__, file=sys.stderr)
    rng = np.random.default_rng(20261129)
    small = _batch(rng, 9, 14)
    large = _batch(rng, 300, 420)
    got: dict[str, np.ndarray] = {}

    def record(key: str, fn: Callable[..., Any], *args: Any) -> None:
        try:
            for name, value in fn(*args).items():
                got[f"{key}|{name}"] = np.asarray(value, dtype=np.float64)
        except (ValueError, TypeError) as err:
            got[f"{key}|error"] = np.frombuffer(f"{type(err).__name__}: {err}".encode(), dtype=np.uint8)

    def sums(kernel_cls: type, ks: list[int] | None, kw: dict[str, Any], *batch: Any) -> dict[str, Any]:
        kernel = kernel_cls(ks, **kw) if ks else kernel_cls(**kw)
        return _flat(kernel.batch_sums(None, *batch))

    def per_list(kernel_cls: type, ks: list[int] | None, kw: dict[str, Any], *batch: Any) -> dict[str, Any]:
        kernel = kernel_cls(ks, **kw) if ks else kernel_cls(**kw)
        return dict(zip(("values", "counted", "weights"), kernel.per_list(*batch), strict=True))

    def collection(names: list[str], kw: dict[str, Any], *batch: Any) -> dict[str, Any]:
        return _flat(ListMetrics(names, **kw).batch_sums(None, *batch))

    for row in LIST_METRICS:
        ks = [1, 3, 10, 40] if row.takes_k else None
        for ties in TIES:
            for opts in OPTIONS:
                kw = {**ties, **opts}
                key = f"{row.name}|{sorted(kw.items())}"
                keras_rs = kw.get("weighting") == "keras_rs"
                s, y, m, lw, iw = small
                w = iw if keras_rs else lw
                record(f"{key}|numpy", sums, row.kernel, ks, kw, s, y, m, w)
                record(f"{key}|per_list", per_list, row.kernel, ks, kw, s, y, m, w)
                t = [torch.as_tensor(a, dtype=torch.float32) for a in (s, y)]
                tm, tw = torch.as_tensor(m), torch.as_tensor(w, dtype=torch.float32)
                record(f"{key}|torch", sums, row.kernel, ks, kw, *t, tm, tw)
                if not opts or keras_rs:
                    s2, y2, m2, lw2, iw2 = large
                    big = [torch.as_tensor(a) for a in (s2, y2, m2, iw2 if keras_rs else lw2)]
                    record(f"{key}|large", sums, row.kernel, [1, 10, 100] if ks else None, kw, *big)
    names = [f"{row.name}@100" if row.takes_k else row.name for row in LIST_METRICS]
    for ties in TIES:
        s2, y2, m2, lw2, _ = large
        big = [torch.as_tensor(a) for a in (s2, y2, m2, lw2)]
        kept = [n for n in names if not (ties["ties"] == "expected" and n.startswith("err"))]
        record(f"collection|{sorted(ties.items())}", collection, kept, ties, *big)
    np.savez(out, **got)


def compare(a: str, b: str) -> float:
    """The largest absolute difference between two dumps (inf where keys or errors differ)."""
    x, y = np.load(a), np.load(b)
    if set(x.files) != set(y.files):
        print("keys differ:", sorted(set(x.files) ^ set(y.files))[:10])
        return float("inf")
    worst = 0.0
    for key in x.files:
        u, v = x[key], y[key]
        if key.endswith("|error"):
            if u.tobytes() != v.tobytes():
                print("error differs:", key)
                return float("inf")
            continue
        if u.shape != v.shape or not np.array_equal(np.isnan(u), np.isnan(v)):
            print("shape or NaNs differ:", key)
            return float("inf")
        ok = ~np.isnan(u)
        if ok.any():
            worst = max(worst, float(np.max(np.abs(u[ok] - v[ok]))))
    print(f"{len(x.files)} arrays compared")
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", help="the other tree (e.g. /work/main)")
    parser.add_argument("this", nargs="?", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--tol", type=float, default=1e-12)
    parser.add_argument("--produce", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.produce:
        produce(args.produce)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        dumps = []
        for i, tree in enumerate((args.other, args.this)):
            out = os.path.join(tmp, f"tree{i}.npz")
            env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve()), "OMP_NUM_THREADS": "1"}
            script = Path(__file__).resolve()
            command = [sys.executable, str(script), args.other, "--produce", out]
            subprocess.run(command, env=env, check=True, cwd=tree)
            dumps.append(out)
        worst = compare(*dumps)
    print(f"max abs difference: {worst:.3g}")
    return 0 if worst <= args.tol else 1


if __name__ == "__main__":
    sys.exit(main())
