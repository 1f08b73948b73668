"""Flat items with a query id per item, grouped into padded lists.

torchmetrics, TorchRec and IR tools hand over flat items: ``preds`` and ``target`` of shape
``(N,)`` and ``indexes`` ``(N,)``, the query of each item. The list metrics read ``(Q, L)``
lists: :func:`group_by_query` turns the one into the other on the input's device, with no
Python loop over queries:

1. a stable sort of the items by query id (items of a query keep their order of arrival, so
   ``ties="first"`` ranks the earlier item first, as on pre-padded lists), skipped where the
   ids arrive in order already (one comparison pass);
2. the run lengths ``n_q`` of the sorted ids (``Q`` runs, ``L = max n_q``: one host read);
3. the mask ``j < n_q`` of the ``(Q, L)`` places, filled row by row with the items in order
   (one masked scatter per array: the items of run ``q`` land in places ``0 .. n_q - 1``).

Padding is masked (``mask`` False): a masked item is not in the list, so the metrics see
exactly the lists of the items given. Cost: one sort of ``N`` ids, a few ``O(N)`` passes and
three ``(Q, L)`` outputs; ragged queries pad to the longest one of the batch.

How queries may span batches is the caller's choice (:data:`QUERY_MODES`); the adapters
document it as:

* ``"contiguous"`` (the default of ``rankstream.ignite``'s query ids and of
  ``rankstream.torchmetrics``): the items of a query arrive together, in one batch (in any
  order there) or continuing from the end of one batch into the next, as a plain
  ``DataLoader`` cuts a flat log grouped by query (ids in any order). The query of a batch's
  last item is open: its items are carried (:func:`split_contiguous`); every other query of
  the batch is closed and its id kept (8 bytes a query, in sorted chunks), so an id that
  comes again after its query closed is a ``ValueError`` naming ``query_mode='any'``, never a
  query counted twice. Memory: the open query's items and one id per closed query;
* ``"whole"``: each batch holds whole queries; nothing is kept (a batch's lists enter the
  state's sums and are gone), nothing is checked: a query cut by a batch counts as two;
* ``"sorted"``: the items arrive sorted by query id across batches, so a query may continue
  into the next batch: only the one query still open at the end of a batch is carried
  (:func:`split_open_query`); an id below the last closed one is a ``ValueError``. Memory:
  the open query's items and one id;
* ``"any"``: any order (torchmetrics' own semantics): every item is stored until the result is
  asked for, then grouped and evaluated at once. This mode stores the predictions: its memory
  grows with the items seen.
"""

from rankstream.core.backends.query_groups import (
    QUERY_MODES,
    check_flat,
    check_query_mode,
    group_by_query,
    split_contiguous,
    split_open_query,
)

__all__ = [
    "QUERY_MODES",
    "check_flat",
    "check_query_mode",
    "group_by_query",
    "split_contiguous",
    "split_open_query",
]
