"""The one table of list metrics: every list metric is one row here and one kernel file.

A row (:mod:`~rankstream.core.lists.rows`) names the metric as collections and ranx /
ir_measures write it (``name`` and ``aliases``, case-insensitive, each with ``@k`` or without),
its kernel, the name of its functional form, and how each adapter presents it
(:class:`Presentation`: the public class name, other names bound to the same class, the peer's
defaults where they differ from the kernel's, and the docstring's opening, which states the
formula and the peer it follows; torchmetrics' a :class:`RetrievalPresentation`, where
torchmetrics has the metric). From these rows come the collection's names
(:mod:`~rankstream.core.lists.collection`), the functional forms
(:mod:`rankstream.core.functional`), the exports of :mod:`rankstream`, and the list metric
classes of :mod:`rankstream.ignite`, :mod:`rankstream.keras` and :mod:`rankstream.torchmetrics`.

Adding a list metric: write its kernel (one file of this package, a subclass of
:class:`~rankstream.core.lists.base.ListKernel`) and add its row. A metric defined outside the
package (a plugin, a test) registers its row at runtime with :func:`register` (its names join
the collections), then asks each presentation for its form (``functional.register``,
``adapters.ignite_lists.register``, ``adapters.keras_metrics.register``,
``adapters.torchmetrics_metrics.register``): the forms of the rows above are made when those
modules are imported, a row registered later gets its forms from those calls.
"""

from __future__ import annotations

from typing import Any

from rankstream.core.lists.auc import AUCKernel, GAUCKernel
from rankstream.core.lists.base import WHOLE_LIST, ListKernel
from rankstream.core.lists.dcg import DCGKernel
from rankstream.core.lists.err import ERRKernel
from rankstream.core.lists.f1 import F1Kernel
from rankstream.core.lists.hit_rate import HitRateKernel
from rankstream.core.lists.map import MAPKernel
from rankstream.core.lists.ndcg import NDCGKernel
from rankstream.core.lists.precision import PrecisionKernel
from rankstream.core.lists.r_precision import RPrecisionKernel
from rankstream.core.lists.rbp import RBPKernel
from rankstream.core.lists.recall import RecallKernel
from rankstream.core.lists.reciprocal_rank import ReciprocalRankKernel
from rankstream.core.lists.retrieved import RetrievedMAPKernel, RetrievedRecallKernel
from rankstream.core.lists.rows import ListMetricRow, Presentation, RetrievalPresentation

__all__ = [
    "BY_NAME", "LIST_METRICS", "WHOLE_LIST", "ListMetricRow", "Presentation", "RetrievalPresentation",
    "names_doc", "register", "row_of",
]  # fmt: skip


def _row(
    name: str,
    kernel: type[ListKernel],
    *,
    aliases: tuple[str, ...] = (),
    function: str | None = None,
    ignite: Presentation,
    keras: Presentation,
    torchmetrics: RetrievalPresentation | None = None,
) -> ListMetricRow:
    """A row of the table: its functional form is ``<name>_at_k`` unless it names another."""
    function = f"{name}_at_k" if function is None else function
    return ListMetricRow(name, aliases, kernel, function, ignite, keras, torchmetrics)


def _keras(
    name: str,
    *,
    doc: str,
    also: tuple[str, ...] = (),
    relevance_threshold: float | None = 1.0,
    **defaults: Any,
) -> Presentation:
    """A Keras presentation: keras-rs' relevance (``y >= 1``: ``relevance_threshold=1.0``) unless
    it says otherwise (None: graded gains), after its other ``defaults``."""
    return Presentation(name, also, {**defaults, "relevance_threshold": relevance_threshold}, doc)


LIST_METRICS: tuple[ListMetricRow, ...] = (
    _row(
        "map",
        MAPKernel,
        aliases=("ap",),
        ignite=Presentation(
            "MAP",
            doc="""\
                Mean Average Precision at k with ignite's argument names and defaults.

                Per list, ``AP@k = (1 / Z) * sum_{j<=k} rel_j * P@j``, with ``rel_j`` the relevance of the
                item ranked ``j``-th by ``y_pred`` and ``P@j`` the precision at ``j``. ``Z = min(R, k)``
                (``R`` the list's number of relevant items; an AP of 1 is reachable at every ``k``) or, with
                ``denominator="all"``, ``Z = R`` (keras-rs, trec_eval). MAP@k is the mean of ``AP@k`` over
                the lists (weighted by ``sample_weight``). ``compute()`` returns a list ordered by sorted
                ``top_k``.

                ignite 0.5.5 has no MAP (its ``ignite.metrics.rec_sys`` holds ``HitRate`` and ``NDCG``); a
                ``rec_sys.MAP`` exists only on ignite's master branch, unreleased. The defaults here follow
                ignite's released ``rec_sys`` metrics (``top_k``, ``ignore_zero_hits=True``, relevant meaning
                ``y > 0``, ties to the earlier index as ignite's ``NDCG``) with ``Z = min(R, k)``.
                """,
        ),
        keras=_keras(
            "MAP",
            also=("MeanAveragePrecision",),
            denominator="all",
            doc="""\
                Mean average precision at ``k``: a drop-in for ``keras_rs.metrics.MeanAveragePrecision``.

                Per list ``AP@k = sum_{j<=k} w_(j) rel_(j) P@j / Z``, ``rel = [y >= 1]``, ``P@j`` the
                (unweighted) precision at ``j``, ``Z = sum_i w_i rel_i`` (0 when ``Z = 0``; ``w`` per-item
                weights, 1 without ``sample_weight``); the mean over the lists, weighted as keras-rs.
                """,
        ),
        torchmetrics=RetrievalPresentation(
            "RetrievalMAP",
            kernel=RetrievedMAPKernel,
            retrieved=True,
            ranked=True,
            doc="""\
                Average precision@k per query, ``(1 / h@k) sum_{j <= k} rel_j P@j`` over the retrieved
                relevant items (torchmetrics ``RetrievalMAP``: the mean precision at the relevant items in
                the top ``k``). Items scored ``<= 0`` are not retrieved (torchmetrics >= 1.7.4) unless
                ``nonpositive_retrieved=True``.
                """,
        ),
    ),
    _row(
        "ndcg",
        NDCGKernel,
        ignite=Presentation(
            "NDCG",
            defaults={"relevance_threshold": 1.0},
            doc="""\
                Normalised DCG at k, a drop-in for ``ignite.metrics.rec_sys.NDCG`` (0.5.5).

                Per list ``nDCG@k = DCG@k / IDCG@k`` with ``DCG@k = sum_{j<=k} g(y_(j)) * d(j)``,
                ``y_(j)`` the label of the item ranked ``j``-th by ``y_pred``, ``g`` the gain,
                ``d(j) = 1 / log2(j + 1)`` the discount, and ``IDCG@k`` the same over the items sorted
                by label; the mean over the lists.
                Ties among equal scores go to the earlier index, as ignite's stable sort, so the numbers are
                ignite's. ``compute()`` returns a list ordered by sorted ``top_k``.
                """,
        ),
        keras=_keras(
            "NDCG",
            relevance_threshold=None,
            doc="""\
                Normalised discounted cumulative gain at ``k``: a drop-in for ``keras_rs.metrics.NDCG``.

                Per list ``nDCG@k = DCG@k / IDCG@k`` (0 when ``IDCG@k = 0``),
                ``DCG@k = sum_{j<=k} w_(j) gain_fn(y_(j)) rank_discount_fn(j)`` over the items ranked by
                ``y_pred``, ``IDCG@k`` the same over the items ordered by ``w_i gain_fn(y_i)`` (``w``
                per-item weights, 1 without ``sample_weight``); the mean over the lists, weighted as keras-rs.
                """,
        ),
        torchmetrics=RetrievalPresentation(
            "RetrievalNormalizedDCG",
            defaults={"gain": "linear_rank", "relevance_threshold": None, "ties": "expected"},
            graded=True,
            ranked=True,
            doc="""\
                nDCG@k per query with linear gains ``DCG@k = sum_{j <= k} y_(j) / log2(j + 1)`` over
                the ideal ``IDCG@k``, tied scores averaged (torchmetrics ``RetrievalNormalizedDCG``,
                scikit-learn's ``ndcg_score``); graded targets ``>= 0``.
                """,
        ),
    ),
    _row(
        "dcg",
        DCGKernel,
        ignite=Presentation(
            "DCG",
            defaults={"relevance_threshold": 1.0},
            doc="""\
                Unnormalised DCG at k, the numerator of `NDCG`: per list
                ``DCG@k = sum_{j<=k} g(y_(j)) * d(j)`` (``y_(j)`` the label of the item ranked ``j``-th by
                ``y_pred``, ``g`` the gain, ``d(j) = 1 / log2(j + 1)``), the mean over the lists (weighted
                by ``sample_weight``). ``compute()`` returns a list ordered by sorted ``top_k``.
                """,
        ),
        keras=_keras(
            "DCG",
            relevance_threshold=None,
            doc="""\
                Discounted cumulative gain at ``k``: a drop-in for ``keras_rs.metrics.DCG``.

                Per list ``DCG@k = sum_{j<=k} w_(j) gain_fn(y_(j)) rank_discount_fn(j)`` over the items
                ranked by ``y_pred`` (``w`` per-item weights, 1 without ``sample_weight``), not normalised;
                the mean over the lists as keras-rs takes it (per-item weights enter the gains and the list
                weights).
                """,
        ),
    ),
    _row(
        "precision",
        PrecisionKernel,
        aliases=("p",),
        ignite=Presentation(
            "Precision",
            doc="""\
                Precision at k: per list, the relevant items among the top ``k`` over ``k``
                (``denominator="k"``, default: trec_eval ``P@k``, torchmetrics ``RetrievalPrecision``) or over
                ``min(k, items in the list)`` (``"valid"``, keras-rs); the mean over the lists (weighted by
                ``sample_weight``). ``compute()`` returns a list ordered by sorted ``top_k``.
                """,
        ),
        keras=_keras(
            "PrecisionAtK",
            denominator="valid",
            doc="""\
                Precision at ``k``: a drop-in for ``keras_rs.metrics.PrecisionAtK``.

                Per list the relevant items (``y >= 1``) among the top ``k`` over ``min(k, valid items)``
                (or over ``k`` with ``denominator="k"``, trec_eval's); the mean over the lists, weighted as
                keras-rs.
                """,
        ),
        torchmetrics=RetrievalPresentation(
            "RetrievalPrecision",
            adaptive_k=True,
            retrieved=True,
            ranked=True,
            doc="""\
                Precision@k per query, ``hits@k / k`` (torchmetrics ``RetrievalPrecision``): ``k`` is
                ``top_k`` (None: the query's size), ``min(top_k, n)`` with ``adaptive_k``. Items scored
                ``<= 0`` are not retrieved (torchmetrics >= 1.7.4) unless ``nonpositive_retrieved=True``.
                """,
        ),
    ),
    _row(
        "recall",
        RecallKernel,
        aliases=("r",),
        ignite=Presentation(
            "Recall",
            doc="""\
                Recall at k: per list, the relevant items among the top ``k`` over all relevant items of
                the list (trec_eval ``recall_k``, torchmetrics ``RetrievalRecall``); the mean over the lists
                (weighted by ``sample_weight``). ``compute()`` returns a list ordered by sorted ``top_k``.
                """,
        ),
        keras=_keras(
            "RecallAtK",
            doc="""\
                Recall at ``k``: a drop-in for ``keras_rs.metrics.RecallAtK``.

                Per list the relevant items (``y >= 1``) among the top ``k`` over all relevant items of the
                list; the mean over the lists, weighted as keras-rs.
                """,
        ),
        torchmetrics=RetrievalPresentation(
            "RetrievalRecall",
            kernel=RetrievedRecallKernel,
            retrieved=True,
            ranked=True,
            doc="""\
                Recall@k per query, ``hits@k / R`` (torchmetrics ``RetrievalRecall``; ``R`` every
                relevant item of the query). Items scored ``<= 0`` are not retrieved (torchmetrics >=
                1.7.4) unless ``nonpositive_retrieved=True``.
                """,
        ),
    ),
    _row(
        "hit_rate",
        HitRateKernel,
        aliases=("hitrate", "success"),
        ignite=Presentation(
            "HitRate",
            defaults={"top_k": 1},
            doc="""\
                Hit rate at k with the arguments and defaults of ``ignite.metrics.rec_sys.HitRate``
                (0.5.5): per list 1 when a relevant item is among the top ``k``, else 0; the mean over the
                lists (weighted by ``sample_weight``). ``compute()`` returns a list ordered by sorted
                ``top_k``. ``k`` past the end of a list is clipped to the list, where ignite raises.

                Ties: ignite's ``HitRate`` takes ``torch.topk``'s order, which leaves the order among equal
                scores unspecified; here ``ties="first"`` ranks the earlier index first. The two agree
                wherever no tie straddles the ``k``-th place.
                """,
        ),
        keras=_keras(
            "HitRateAtK",
            doc="""\
                Hit rate at ``k`` (not in keras-rs; in its conventions).

                Per list 1 when a relevant item (``y >= 1``) is among the top ``k``, else 0; the mean over
                the lists, weighted as keras-rs.
                """,
        ),
        torchmetrics=RetrievalPresentation(
            "RetrievalHitRate",
            ranked=True,
            doc="""\
                Hit rate@k per query, 1 when a relevant item is in the top ``k`` (torchmetrics
                ``RetrievalHitRate``; every item is retrieved, as there).
                """,
        ),
    ),
    _row(
        "mrr",
        ReciprocalRankKernel,
        aliases=("rr",),
        function="reciprocal_rank_at_k",
        ignite=Presentation(
            "MeanReciprocalRank",
            also=("MRR",),
            doc="""\
                MRR at k, list-wise: per list ``1 / rank`` of the first relevant item within the top
                ``k`` (0 if none), the mean over the lists (weighted by ``sample_weight``), as keras-rs
                ``MeanReciprocalRank``, torchmetrics ``RetrievalMRR`` and trec_eval ``recip_rank``.
                ``compute()`` returns a list ordered by sorted ``top_k``. PyKEEN's per-positive MRR is
                `InverseHarmonicMeanRank`.
                """,
        ),
        keras=_keras(
            "MeanReciprocalRank",
            also=("MRR",),
            doc="""\
                List-wise MRR at ``k``: a drop-in for ``keras_rs.metrics.MeanReciprocalRank``.

                Per list ``1 / rank`` of the first relevant item (``y >= 1``) among the top ``k``, else 0;
                the mean over the lists, weighted as keras-rs. PyKEEN's per-positive MRR is
                `InverseHarmonicMeanRank`.
                """,
        ),
        torchmetrics=RetrievalPresentation(
            "RetrievalMRR",
            retrieved=True,
            ranked=True,
            doc="""\
                Reciprocal rank@k per query, ``1 / j*`` of the first relevant item if ``j* <= k``
                (torchmetrics ``RetrievalMRR``). Items scored ``<= 0`` are not retrieved (torchmetrics
                >= 1.7.4) unless ``nonpositive_retrieved=True``.
                """,
        ),
    ),
    _row(
        "r_precision",
        RPrecisionKernel,
        aliases=("rprec",),
        function="r_precision",
        ignite=Presentation(
            "RPrecision",
            doc="""\
                R-precision: per list the precision at ``R``, the list's number of relevant items
                (trec_eval ``Rprec``, torchmetrics ``RetrievalRPrecision``); the mean over the lists
                (weighted by ``sample_weight``). ``compute()`` returns a float. Each list is ranked whole
                (a sort per list), so there is no ``top_k``.
                """,
        ),
        keras=_keras(
            "RPrecision",
            doc="""\
                R-precision (not in keras-rs; in its conventions).

                Per list the precision at ``R``, the list's number of relevant items (``y >= 1``); each list
                is ranked whole, so there is no ``k``; the mean over the lists, weighted as keras-rs.
                """,
        ),
        torchmetrics=RetrievalPresentation(
            "RetrievalRPrecision",
            nonpositive=False,
            doc="""\
                R-precision per query, the relevant items among the top ``R`` over ``R`` (torchmetrics
                ``RetrievalRPrecision``).
                """,
        ),
    ),
    _row(
        "f1",
        F1Kernel,
        ignite=Presentation(
            "F1",
            doc="""\
                F1 at k: per list the harmonic mean of ``P@k`` (over ``k``) and ``R@k``,
                ``F1@k = 2 h / (k + R)`` with ``h`` the relevant items among the top ``k`` and ``R`` those
                of the list (0 when ``h = 0``), as ranx's ``f1``; the mean over the lists (weighted by
                ``sample_weight``). ``compute()`` returns a list ordered by sorted ``top_k``.
                """,
        ),
        keras=_keras(
            "F1AtK",
            doc="""\
                F1 at ``k`` (not in keras-rs; in its conventions).

                Per list the harmonic mean of precision (over ``k``) and recall at ``k``,
                ``2 h / (k + R)`` with ``h`` the relevant items (``y >= 1``) among the top ``k`` and ``R``
                those of the list, as ranx's ``f1``; the mean over the lists, weighted as keras-rs.
                """,
        ),
        torchmetrics=RetrievalPresentation(
            "RetrievalF1",
            doc="""\
                F1@k per query, ``2 h@k / (k + R)`` (the harmonic mean of P@k and R@k; ``k`` past the
                query's size is its size with ``top_k=None`` only); every item is retrieved.
                """,
        ),
    ),
    _row(
        "err",
        ERRKernel,
        ignite=Presentation(
            "ERR",
            also=("ExpectedReciprocalRank",),
            doc="""\
                Expected reciprocal rank at k (Chapelle et al. 2009), as ir_measures' ``ERR@k`` (gdeval).

                Per list ``ERR@k = sum_{j<=k} (R_j / j) prod_{i<j} (1 - R_i)`` with
                ``R_j = (2^{g_j} - 1) / 2^{g_max}``, ``g_j`` the label of the item ranked ``j``-th by
                ``y_pred`` clipped to ``[0, max_grade]`` (``g_max = max_grade``, 4 as gdeval); the mean over
                the lists (weighted by ``sample_weight``). ``compute()`` returns a list ordered by sorted
                ``top_k``.
                """,
        ),
        keras=_keras(
            "ERR",
            also=("ExpectedReciprocalRank",),
            relevance_threshold=None,
            doc="""\
                Expected reciprocal rank at ``k`` (not in keras-rs; in its conventions).

                Per list ``ERR@k = sum_{j<=k} (R_j / j) prod_{i<j} (1 - R_i)`` with
                ``R_j = (2^{g_j} - 1) / 2^{g_max}`` (``g_j`` the label clipped to ``[0, max_grade]``, 4 by
                default as ir_measures' gdeval); the mean over the lists, weighted as keras-rs.
                """,
        ),
        torchmetrics=RetrievalPresentation(
            "RetrievalERR",
            options=(("max_grade", 4.0, "float"),),
            nonpositive=False,
            graded=True,
            doc="""\
                Expected reciprocal rank@k (Chapelle et al. 2009) per query on graded targets,
                ``sum_{j <= k} (1 / j) R_j prod_{i < j} (1 - R_i)``, ``R = (2^y - 1) / 2^max_grade``.
                """,
        ),
    ),
    _row(
        "rbp",
        RBPKernel,
        ignite=Presentation(
            "RBP",
            also=("RankBiasedPrecision",),
            doc="""\
                Rank-biased precision (Moffat and Zobel 2008) with persistence ``p`` and its residual.

                Per list ``RBP@k = (1 - p) sum_{j<=k} r_j p^(j-1)`` (``r_j`` the relevance of the item
                ranked ``j``-th by ``y_pred``: binary, or the label with ``graded=True``), read over the
                whole list by default (``top_k`` truncates it); the mean over the lists (weighted by
                ``sample_weight``). With ``residual=True`` ``compute()`` returns
                ``{"value": ..., "residual": ...}``, the residual ``p^min(k, n)`` (what unseen items could
                add) averaged alike; attached as ``name``, the engine gets ``name`` and ``name_residual``.
                """,
        ),
        keras=_keras(
            "RBP",
            also=("RankBiasedPrecision",),
            doc="""\
                Rank-biased precision with persistence ``p`` (not in keras-rs; in its conventions).

                Per list ``RBP@k = (1 - p) sum_{j<=k} r_j p^(j-1)`` (``r_j = [y >= 1]``, or the label with
                ``graded=True``), the whole list with ``k=None``; the mean over the lists, weighted as
                keras-rs. With ``residual=True`` ``result()`` is ``{name: value, name + "_residual": ...}``,
                the residual ``p^min(k, n)`` averaged alike.
                """,
        ),
        torchmetrics=RetrievalPresentation(
            "RetrievalRBP",
            options=(("p", 0.8, "float"), ("graded", False, "bool")),
            nonpositive=False,
            doc="""\
                Rank-biased precision per query, ``(1 - p) sum_{j <= k} rel_j p^(j - 1)`` (Moffat and
                Zobel; ``top_k=None``: the whole query), binary relevance (``graded=True``: the target as
                the gain, in [0, 1]).
                """,
        ),
    ),
    _row(
        "auc",
        AUCKernel,
        function="list_auc",
        ignite=Presentation(
            "ListAUC",
            doc="""\
                Per-list ROC AUC, averaged over the lists holding both classes (TorchRec's ``GAUCMetric``).

                Per list ``AUC = P(score of a relevant item > score of a non-relevant one)``, ties counting
                one half (scikit-learn's ``roc_auc_score`` of the list); lists with one class only are
                skipped (or count 0 with ``ignore_zero_hits=False``); the mean over the lists, each weighing
                its ``sample_weight`` (``weight_by_size=True``: times its number of items, `GAUC`).
                ``compute()`` returns a float. Each list is sorted whole, so there is no ``top_k``.
                """,
        ),
        keras=_keras(
            "ListAUC",
            doc="""\
                Per-list ROC AUC (relevant meaning ``y >= 1``), averaged over the lists holding both classes.

                Per list the probability that a relevant item scores above a non-relevant one, ties counting
                one half; the mean over the lists, weighted as keras-rs (``weight_by_size=True``: each list
                also weighs its number of items, `GAUC`). Each list is sorted whole: there is no ``k``.
                """,
        ),
        torchmetrics=RetrievalPresentation(
            "RetrievalAUC",
            nonpositive=False,
            both_classes=True,
            empty="skip",
            doc="""\
                Per-query ROC AUC, ties counting one half (scikit-learn's ``roc_auc_score`` of the
                query), averaged over the queries with both classes (TorchRec's ``GAUCMetric``). A query
                missing either class is "empty": skipped by default.
                """,
        ),
    ),
    _row(
        "gauc",
        GAUCKernel,
        function="group_auc",
        ignite=Presentation(
            "GAUC",
            also=("GroupAUC",),
            doc="""\
                Group AUC weighted by impressions (the DIN paper's GAUC): ``sum_i n_i AUC_i / sum_i n_i``.

                ``AUC_i`` the ROC AUC of list ``i`` (ties counting one half) and ``n_i`` its number of items
                (times its ``sample_weight``), over the lists holding both classes (the others are skipped,
                or count 0 with ``ignore_zero_hits=False``); ``weight_by_size=False`` is `ListAUC`.
                ``compute()`` returns a float. Each list is sorted whole, so there is no ``top_k``.
                """,
        ),
        keras=_keras(
            "GAUC",
            also=("GroupAUC",),
            doc="""\
                Group AUC weighted by impressions (the DIN paper's GAUC), relevant meaning ``y >= 1``.

                ``sum_i w_i n_i AUC_i / sum_i w_i n_i`` over the lists holding both classes, ``AUC_i`` the
                list's ROC AUC (ties counting one half), ``n_i`` its number of items, ``w_i`` its keras-rs
                weight; ``weight_by_size=False`` is `ListAUC`. There is no ``k``.
                """,
        ),
        torchmetrics=RetrievalPresentation(
            "RetrievalGAUC",
            nonpositive=False,
            both_classes=True,
            empty="skip",
            parent="RetrievalAUC",
            doc="""\
                Group AUC: the per-query AUC weighted by the query's number of items,
                ``sum_q n_q AUC_q / sum_q n_q`` over the queries with both classes (the DIN paper's
                impression-weighted GAUC). A query missing either class is skipped by default.
                """,
        ),
    ),
)

#: every spelling (lower case) -> its row
BY_NAME: dict[str, ListMetricRow] = {
    spelling: row for row in LIST_METRICS for spelling in (row.name, *row.aliases)
}


def register(row: ListMetricRow) -> ListMetricRow:
    """Adds a list metric defined outside this table at runtime: its name and aliases join
    :data:`BY_NAME` (the collections' names: ``ListMetrics(["name@k"])`` in the core and every
    adapter) and the row joins :data:`LIST_METRICS` (this module's; modules that imported the
    tuple before keep theirs). Returns the row. A ``TypeError`` for a row that is not a
    :class:`ListMetricRow` or whose kernel is not a ``ListKernel``; a ``ValueError`` for a name
    or alias already taken."""
    global LIST_METRICS
    if not isinstance(row, ListMetricRow):
        raise TypeError(f"row must be a ListMetricRow, got {row!r}")
    if not (isinstance(row.kernel, type) and issubclass(row.kernel, ListKernel)):
        raise TypeError(f"row.kernel must be a ListKernel subclass, got {row.kernel!r}")
    spellings = [spelling.lower() for spelling in (row.name, *row.aliases)]
    taken = [spelling for spelling in spellings if spelling in BY_NAME]
    if taken:
        raise ValueError(f"row {row.name!r}: the names {taken} are taken already")
    BY_NAME.update(dict.fromkeys(spellings, row))
    LIST_METRICS = (*LIST_METRICS, row)
    return row


def row_of(name: str) -> ListMetricRow:
    """The row of a base name or alias (case-insensitive, without ``@k``)."""
    try:
        return BY_NAME[name.lower()]
    except KeyError:
        raise ValueError(f"unknown list metric {name!r}: one of {sorted(BY_NAME)}") from None


def names_doc() -> str:
    """The names for docstrings: ``"``map`` (``ap``), ``ndcg``, ..."`` in the table's order."""
    return ", ".join(
        f"``{row.name}``" + (f" ({', '.join(f'``{a}``' for a in row.aliases)})" if row.aliases else "")
        for row in LIST_METRICS
    )
