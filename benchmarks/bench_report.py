"""PyKEEN's whole report (head, tail and both sides; optimistic, realistic and pessimistic
ranks) for one evaluation pass, torch CPU, filtered masks, against one rank type.

Every case streams the same batches of scores for head and tail prediction and computes its
result once at the end (the whole metric time of an evaluation):

* ``one rank type``: one ``RankBasedMetrics(rank_type="realistic")`` with the four families of
  the previous release (``metrics=METRICS``), updated with each side's batch: the baseline of
  the issue's 1.3x target;

(each metric made once and ``reset()`` per evaluation, as an engine's attached metrics are)
* ``report, one metric``: ``RankBasedMetrics(rank_type=RANK_TYPES, sides=("head", "tail"))``,
  everything PyKEEN reports and more (median histogram, dispersion), one update per batch;
* ``report, 9 metrics``: the way before, one metric per side and rank type, "both" fed both sides;
* ``PyKEEN``: ``RankBasedEvaluator.process_scores_`` per side and batch, then ``finalize()``.

Memory: the peak of the temporary memory of one evaluation pass (every update and the final
``compute``) of each case, after a first pass (the metrics keep their workspace and expectation
terms across passes, as attached metrics do), in MiB and as a multiple of the bytes of one
batch's scores of one side (:func:`benchmarks.common.peak_temp_bytes`).

Shapes: UMLS's test set (661 triples, 135 entities) and an FB15k-237-sized one (20,466 test
triples would take long here: 2,048 queries x 14,541 entities).
"""

from __future__ import annotations

import argparse
import logging

import torch

from benchmarks.common import PEAK_COLUMNS, interleaved_ms, markdown_table, peak_columns
from rankstream.core.ranks.families import METRICS
from rankstream.ignite import RANK_TYPES, RankBasedMetrics

KS = (1, 3, 5, 10)
SIDES = ("head", "tail")


def make_batches(queries: int, entities: int, batch: int, seed: int = 0) -> list[dict]:
    """Per batch and side: scores, true index, a filter mask (a few other known answers)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for start in range(0, queries, batch):
        b = min(batch, queries - start)
        item = {}
        for side in SIDES:
            scores = torch.randn(b, entities, generator=g)
            y = torch.randint(0, entities, (b,), generator=g)
            mask = torch.rand(b, entities, generator=g) > 2.0 / entities
            mask[torch.arange(b), y] = True
            item[side] = {"y_pred": scores, "y": y, "mask": mask}
        out.append(item)
    return out


def one_type(metric: RankBasedMetrics, batches: list[dict]) -> None:
    metric.reset()
    for batch in batches:
        for side in SIDES:
            metric.update(batch[side])
    metric.compute()


def report(metric: RankBasedMetrics, batches: list[dict]) -> None:
    metric.reset()
    for batch in batches:
        metric.update(batch)
    metric.compute()


def nine(metrics: dict, batches: list[dict]) -> None:
    for metric in metrics.values():
        metric.reset()
    for batch in batches:
        for (side, _), metric in metrics.items():
            for s in SIDES if side == "both" else (side,):
                metric.update(batch[s])
    for metric in metrics.values():
        metric.compute()


def pykeen(batches: list[dict]) -> None:
    from pykeen.evaluation import RankBasedEvaluator

    ev = RankBasedEvaluator(filtered=True, clear_on_finalize=True)
    for batch in batches:
        for side in SIDES:
            d = batch[side]
            rows = torch.arange(d["y"].shape[0])
            true = d["y_pred"][rows, d["y"]][:, None]
            scores = torch.where(d["mask"], d["y_pred"], float("nan"))
            ev.process_scores_(hrt_batch=None, target=side, scores=scores, true_scores=true)
    ev.finalize()


def run(quick: bool = False) -> list[dict]:
    logging.getLogger("pykeen").setLevel(logging.ERROR)
    shapes = [("UMLS test, 661 x 135", 661, 135, 256)]
    shapes.append(
        ("FB15k-237 size, 512 x 14541", 512, 14541, 256)
        if quick
        else ("FB15k-237 size, 2048 x 14541", 2048, 14541, 256)
    )
    rows = []
    for label, queries, entities, batch in shapes:
        data = make_batches(queries, entities, batch)
        # metrics made once and reset per evaluation, as an engine's attached metrics are
        single = RankBasedMetrics(KS, "realistic", metrics=METRICS)
        full = RankBasedMetrics(KS, RANK_TYPES, sides=SIDES)
        families = RankBasedMetrics(KS, RANK_TYPES, sides=SIDES, metrics=METRICS)
        nine_metrics = {(s, rt): RankBasedMetrics(KS, rt) for s in (*SIDES, "both") for rt in RANK_TYPES}
        passes = {
            "one rank type (realistic, 4 families)": lambda d=data, m=single: one_type(m, d),
            "report, one metric": lambda d=data, m=full: report(m, d),
            "report, one metric, 4 families only": lambda d=data, m=families: report(m, d),
            "report, 9 metrics": lambda d=data, m=nine_metrics: nine(m, d),
            "PyKEEN RankBasedEvaluator": lambda d=data: pykeen(d),
        }
        times = interleaved_ms(passes, repeat=5 if quick else 11, warmup=1)
        first = data[0]["head"]["y_pred"]
        nbytes = first.numel() * first.element_size()
        base = times["one rank type (realistic, 4 families)"]
        for name, ms in times.items():
            peak = peak_columns(passes[name], nbytes)
            rows.append({"case": label, "metric": name, "ms": ms, "x one rank type": ms / base, **peak})
    return rows


COLUMNS = ["case", "metric", "ms", "x one rank type", *PEAK_COLUMNS]

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    print(markdown_table(run(ap.parse_args().quick), COLUMNS))
