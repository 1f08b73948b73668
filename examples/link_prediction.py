"""Evaluate a PyKEEN link-prediction model with rankstream in an Ignite engine, next to PyKEEN.

Trains a small TransE model on PyKEEN's bundled Nations graph (14 entities, 55 relations) for a few
seconds on the CPU, then evaluates the test triples twice on the same model, in the filtered setting
(every other known true triple, from training, validation and test, is not a candidate):

- rankstream: an Ignite ``Engine`` scores each batch of test triples for head and tail prediction,
  builds the candidate masks with ``rankstream.filtering.FilterIndex``, and one
  ``rankstream.ignite.RankBasedMetrics`` streams every metric for both sides and all three rank types
  (optimistic, realistic, pessimistic) in one pass, keyed like PyKEEN (``"both.realistic.hits_at_10"``);
- PyKEEN: ``RankBasedEvaluator`` (filtered) on the same model, the same triples and batches.

It prints a few key rows side by side and the largest absolute difference over every key both report.

Run: ``python examples/link_prediction.py [--epochs N | --quick]`` (needs ``pykeen``, a dev extra).
"""

from __future__ import annotations

import argparse
import logging
import math
import time
import warnings
from typing import Any

import torch
from ignite.engine import Engine

from rankstream.filtering import FilterIndex
from rankstream.ignite import RANK_TYPES, RankBasedMetrics

KS = (1, 3, 5, 10)
SIDES = ("head", "tail")
BATCH_SIZE = 64  # test triples per batch, the same for rankstream and PyKEEN (identical scores)
ROWS = [
    "both.realistic.inverse_harmonic_mean_rank",
    "both.realistic.hits_at_1",
    "both.realistic.hits_at_3",
    "both.realistic.hits_at_10",
    "both.realistic.arithmetic_mean_rank",
    "both.realistic.adjusted_arithmetic_mean_rank_index",
    "both.realistic.median_rank",
    "both.realistic.standard_deviation",
    "head.optimistic.hits_at_1",
    "tail.pessimistic.geometric_mean_rank",
]


def train(dataset: Any, epochs: int, seed: int = 0) -> Any:
    """A small TransE on ``dataset`` through PyKEEN's pipeline (CPU, seeded); returns the model."""
    from pykeen.pipeline import pipeline

    return pipeline(
        dataset=dataset,
        model="TransE",
        model_kwargs={"embedding_dim": 32},
        optimizer_kwargs={"lr": 0.01},
        training_loop="slcwa",
        training_kwargs={"num_epochs": epochs, "batch_size": 256, "use_tqdm": False},
        evaluation_kwargs={"use_tqdm": False, "batch_size": BATCH_SIZE},
        random_seed=seed,
        device="cpu",
    ).model


def evaluate_rankstream(model: Any, dataset: Any) -> dict[str, float]:
    """rankstream's filtered evaluation of ``model`` on the test triples, in an Ignite engine."""
    index = FilterIndex(
        [dataset.training.mapped_triples, dataset.validation.mapped_triples, dataset.testing.mapped_triples],
        num_entities=dataset.num_entities,
    )
    columns = {"head": 0, "tail": 2}
    model.eval()

    def eval_step(engine: Engine, batch: torch.Tensor) -> dict[str, dict[str, torch.Tensor]]:
        with torch.inference_mode():
            return {
                side: {
                    "y_pred": model.predict(hrt_batch=batch, target=side),  # (B, num_entities)
                    "y": batch[:, columns[side]],  # the true entity of each query
                    "mask": index.mask(batch, side),  # False: another known answer, not a candidate
                }
                for side in SIDES
            }

    evaluator = Engine(eval_step)
    RankBasedMetrics(ks=KS, rank_type=RANK_TYPES, sides=SIDES, prefix="").attach(evaluator, "rank")
    state = evaluator.run(list(dataset.testing.mapped_triples.split(BATCH_SIZE)))
    return {key: float(value) for key, value in state.metrics["rank"].items()}


def evaluate_pykeen(model: Any, dataset: Any) -> dict[str, float]:
    """PyKEEN's filtered ``RankBasedEvaluator`` on the same model, triples and batches."""
    from pykeen.evaluation import RankBasedEvaluator

    results = RankBasedEvaluator(filtered=True).evaluate(
        model,
        dataset.testing.mapped_triples,
        additional_filter_triples=[dataset.training.mapped_triples, dataset.validation.mapped_triples],
        batch_size=BATCH_SIZE,
        use_tqdm=False,
    )
    return {key: float(value) for key, value in results.to_flat_dict().items()}


def difference(a: float, b: float) -> float:
    """|a - b|, 0 where both are NaN (e.g. a variance of one task) or the same infinity."""
    if (math.isnan(a) and math.isnan(b)) or a == b:
        return 0.0
    return abs(a - b)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=10, help="training epochs (default 10)")
    parser.add_argument("--quick", action="store_true", help="2 epochs: a smoke run")
    args = parser.parse_args(argv)
    epochs = 2 if args.quick else args.epochs

    from pykeen.datasets import Nations  # importing pykeen sets its logger to INFO

    # PyKEEN logs timings, CPU batch-size advice and a dataloader warning; not this example's subject
    for name in ("pykeen", "torch_max_mem"):
        logging.getLogger(name).setLevel(logging.ERROR)

    dataset = Nations()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model = train(dataset, epochs)
    trained = time.perf_counter() - t0
    t1 = time.perf_counter()
    ours = evaluate_rankstream(model, dataset)
    t2 = time.perf_counter()
    theirs = evaluate_pykeen(model, dataset)
    t3 = time.perf_counter()

    # PyKEEN's flat dict names AdjustedHitsAtK and ZHitsAtK without k ("z_hits_at_k"): its instances
    # for k = 1, 3, 5, 10 overwrite each other, and k = 10's value remains; compare it with ours at k = 10
    # unless rankstream reports the k-less key itself
    aliases = {"adjusted_hits_at_k": "adjusted_hits_at_10", "z_hits_at_k": "z_hits_at_10"}
    pairs = {}
    for key in theirs:
        side, rank_type, name = key.split(".", 2)
        ours_key = key if key in ours or name not in aliases else f"{side}.{rank_type}.{aliases[name]}"
        if ours_key in ours:
            pairs[key] = ours_key
    shared = sorted(pairs)
    missing = sorted(set(theirs) - set(pairs))
    diffs = {key: difference(ours[pairs[key]], theirs[key]) for key in shared}
    max_key = max(diffs, key=diffs.__getitem__) if diffs else None
    max_diff = diffs[max_key] if max_key is not None else float("nan")

    n_test = dataset.testing.mapped_triples.shape[0]
    print(
        f"TransE on Nations, {epochs} epochs ({trained:.1f} s); {n_test} test triples, head and tail "
        f"prediction, filtered (train + valid + test known)"
    )
    width = max(len(row) for row in ROWS)
    print(f"{'metric':<{width}} | {'rankstream':>10} | {'PyKEEN':>10}")
    print("-" * (width + 28))
    for row in ROWS:
        print(f"{row:<{width}} | {ours.get(row, float('nan')):10.6f} | {theirs.get(row, float('nan')):10.6f}")
    print(f"keys both report: {len(shared)}; max abs difference: {max_diff:.3g} ({max_key})")
    if max_key is not None and ".realistic." in max_key and max_diff > 1e-9:
        print(
            "  (PyKEEN keeps realistic ranks as float32, so its realistic values carry float32 rounding; "
            "rankstream accumulates in float64)"
        )
    print(f"PyKEEN keys rankstream does not report: {missing if missing else 'none'}")
    print(f"rankstream keys PyKEEN does not report: {len(set(ours) - set(pairs.values()))}")
    print(f"evaluation: rankstream {t2 - t1:.2f} s, PyKEEN {t3 - t2:.2f} s")
    return {
        "epochs": epochs,
        "rankstream": ours,
        "pykeen": theirs,
        "shared_keys": shared,
        "missing_keys": missing,
        "max_abs_diff": max_diff,
        "max_diff_key": max_key,
    }


if __name__ == "__main__":
    main()
