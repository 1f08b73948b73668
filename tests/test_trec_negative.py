"""trec_eval with negative judgments: qrels graded in {-2, -1, 0, 1, 2, 3}, where trec_eval reads
a judgment below 0 as "pooled but unjudged" (not relevant, gain 0). The peer map's trec_eval rows,
run as written through an Ignite ``Engine``, against trec_eval (pytrec_eval through ir_measures),
query by query and as the mean over the queries.

Runs as trec_eval sees them: the run holds some judged documents and some unjudged ones (label 0
in the list); a judged document the run does not retrieve is an item scored below every
retrieved one, so it counts in R and the ideal ranking but is never ranked within the cut-offs
tested (at most the run's length). Measures without a cut-off (``ndcg``, ``map``, ``Rprec``) are
compared on runs that retrieve every judged document. Scores are distinct (trec_eval breaks ties
by document id)."""

from __future__ import annotations

import ir_measures
import numpy as np
import pytest
import torch
from ignite.engine import Engine

from rankstream.ignite import MAP, MRR, NDCG, HitRate, Precision, Recall, RPrecision

GRADES = np.array([-2, -1, 0, 1, 2, 3])

# trec_eval measure (ir_measures name; None: no cut-off) -> the peer map's rankstream metric
ROWS = {
    "P": lambda ks: Precision(top_k=ks, ignore_zero_hits=False),
    "R": lambda ks: Recall(top_k=ks, ignore_zero_hits=False),
    "Success": lambda ks: HitRate(top_k=ks, ignore_zero_hits=False),
    "RR": lambda ks: MRR(top_k=ks, ignore_zero_hits=False),
    "AP": lambda ks: MAP(top_k=ks, denominator="all", relevance_threshold=1.0, ignore_zero_hits=False),
    "nDCG": lambda ks: NDCG(top_k=ks, gain_function="linear_rank", ignore_zero_hits=False),
    "Rprec": lambda ks: RPrecision(ignore_zero_hits=False),
}


def _case(seed: int, *, retrieve_all: bool):
    """Lists of ``n`` items: judged documents (graded in GRADES, some unretrieved unless
    ``retrieve_all``) and unjudged retrieved ones; the qrels and run trec_eval reads, the
    rankstream batch, and the shortest run's length."""
    rng = np.random.default_rng(seed)
    b, n = 9, 14
    scores = np.empty((b, n))
    labels = np.zeros((b, n))
    qrels, run, lengths = {}, {}, []
    for q in range(b):
        judged = rng.random(n) < 0.7
        judged[0] = True
        grades = rng.choice(GRADES, size=n)
        if q == 0:
            grades[:] = rng.choice([-2, -1, 0], size=n)  # a query without a relevant document
        retrieved = np.ones(n, bool) if retrieve_all else rng.random(n) < 0.75
        retrieved[~judged] = True  # an unjudged document is in the list only as retrieved
        retrieved[0] = True
        s = rng.permutation(n) + rng.random()  # distinct
        s[~retrieved] = -1.0 - rng.random(int((~retrieved).sum()))  # below every retrieved one
        scores[q] = s
        labels[q] = np.where(judged, grades, 0)
        qrels[f"q{q}"] = {f"d{i}": int(grades[i]) for i in range(n) if judged[i]}
        run[f"q{q}"] = {f"d{i}": float(s[i]) for i in range(n) if retrieved[i]}
        lengths.append(int(retrieved.sum()))
    return scores, labels, qrels, run, min(lengths)


def _engine_value(metric, scores, labels):
    ev = Engine(lambda engine, batch: batch)
    metric.attach(ev, "m")
    parts = [slice(0, 4), slice(4, None)]
    batches = [(torch.from_numpy(scores[p]), torch.from_numpy(labels[p])) for p in parts]
    value = ev.run(batches).metrics["m"]
    return value if isinstance(value, list) else [value]


def _trec(measures, qrels, run):
    per_query = {}
    for r in ir_measures.iter_calc(measures, qrels, run):
        per_query.setdefault(str(r.measure), {})[r.query_id] = r.value
    return per_query


@pytest.mark.parametrize("measure", ROWS)
@pytest.mark.parametrize("seed", range(5))
def test_rows_match_trec_eval_with_negative_judgments(measure, seed):
    cut = measure != "Rprec"
    for retrieve_all in (True, False):
        if not retrieve_all and not cut:
            continue
        scores, labels, qrels, run, shortest = _case(100 * seed + retrieve_all, retrieve_all=retrieve_all)
        assert (labels < 0).any()
        ks = sorted({1, 3, shortest} | ({scores.shape[1]} if retrieve_all else set()))
        to_measure = getattr(ir_measures, measure)
        measures = [to_measure @ k for k in ks] if cut else [to_measure]
        expected = _trec(measures, qrels, run)
        assert all(len(v) == len(qrels) for v in expected.values())  # every query, none dropped
        got = _engine_value(ROWS[measure](ks if cut else None), scores, labels)
        want = [float(np.mean(list(expected[str(m)].values()))) for m in measures]
        assert got == pytest.approx(want, abs=1e-12)
        kernel = ROWS[measure](ks if cut else None).kernel
        values, counted, _ = kernel.per_list(scores, labels)
        assert counted.all()
        for q in range(len(scores)):
            assert values[q].tolist() == pytest.approx(
                [expected[str(m)][f"q{q}"] for m in measures], abs=1e-12
            )


@pytest.mark.parametrize("seed", range(5))
def test_whole_run_measures_match_trec_eval(seed):
    """trec_eval's ``ndcg`` and ``map`` (no cut-off) are the rows at k = the list length, on
    runs that retrieve every judged document."""
    scores, labels, qrels, run, _ = _case(500 + seed, retrieve_all=True)
    n = scores.shape[1]
    expected = _trec([ir_measures.nDCG, ir_measures.AP], qrels, run)
    for name, metric in (
        ("nDCG", NDCG(top_k=n, gain_function="linear_rank", ignore_zero_hits=False)),
        ("AP", MAP(top_k=n, denominator="all", relevance_threshold=1.0, ignore_zero_hits=False)),
    ):
        got = _engine_value(metric, scores, labels)
        assert got[0] == pytest.approx(float(np.mean(list(expected[name].values()))), abs=1e-12)


def test_the_old_row_takes_negative_judgments_as_negative_gains():
    """Why the row changed: ``relevance_threshold=None`` keeps a judgment of -1 as a gain of
    -1, which trec_eval reads as 0."""
    scores, labels, qrels, run, _ = _case(7, retrieve_all=True)
    expected = _trec([ir_measures.nDCG @ 5], qrels, run)["nDCG@5"]
    kernel = NDCG(top_k=5, gain_function="linear_rank", relevance_threshold=None).kernel
    values, counted, _ = kernel.per_list(scores, labels)
    differ = [q for q in range(len(scores)) if counted[q] and abs(values[q][0] - expected[f"q{q}"]) > 1e-9]
    assert differ
