"""Every memory budget and size threshold of rankstream, in one place.

:class:`Sizes` is a frozen dataclass of numbers; :data:`SIZES` holds today's values (each
measured where it was introduced; the notes below say what each bounds). A
:class:`~rankstream.core.backends.Context` carries one (``ctx.sizes``, :data:`SIZES` unless a
context is made with others), and the core reads every size from it: the executor's blocks of
rows, the selection's passes, the top-k's in-place paths, the kernels' shared passes. Kernels
hold no size: they declare what they need (``ranked_bytes``, the bytes per ranked item of
their update), and the executor turns that into blocks of rows. The backends' own tuning (the
tiles of their counting passes, the small inputs that take the plain ops) reads the same
numbers from :data:`SIZES` at call time (an ``Ops`` method gets no context), and the one
budget that depends on the call, the cap on a scratch tile while a batch goes in blocks of
rows, reaches them as an argument from the context (``Context.tile_cap``).

This module imports nothing: the backends, the core and the adapters all read it. A test
changes a size with ``monkeypatch.setattr(sizes, "SIZES", dataclasses.replace(sizes.SIZES,
...))``; contexts made after that carry the new numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SIZES", "Sizes"]


@dataclass(frozen=True)
class Sizes:
    """The size thresholds and memory budgets (counts of values unless named ``_bytes``;
    ``_share``: a fraction ``1 / share`` of the batch's values)."""

    # -- the execution layer: blocks of rows of one batch (core/execution/blocks.py) ----------
    #: a batch is selected in blocks of rows where values are read back and its ``B x K``
    #: selection holds at least ``select_blocks_from`` ranked items and more than
    #: ``select_share`` of the scores' bytes at its kernels' bytes per ranked item
    #: (``ListKernel.ranked_bytes``, ``selected_bytes`` by default: the ranking's top-(K + 1)
    #: values and indices, the gathered labels and membership, their float64 casts, the
    #: kernels' (B, K) arrays); each block then holds at most 3/16 of the scores, beside the
    #: counting passes' tile of at most a 16th of them from 2^21 scores on
    #: (``block_tile_share``): inside the quarter an update may hold. Below 2^14 ranked items a
    #: selection holds at most 1.5 MiB, 3/16 of 2^21 float32 scores. Each block costs the
    #: selection's calls once more (about 0.1 ms a kernel), so blocks are as large as the share
    #: lets them be (measured: two blocks of a 2,048 x 1,024 ``ListMetrics`` at k = 20 cost 2-4%
    #: of the update in one piece)
    selected_bytes: int = 32
    select_share: float = 5 / 32
    #: and a block's row at least ``selected_row_bytes``: its per-list arrays, ``(rows,)``
    #: counts, flags and values in float64 beside the ranked items' (measured: about 53 bytes a
    #: list where the precision of a list of 10 items needs a selection of depth 1)
    selected_row_bytes: int = 128
    select_blocks_from: int = 1 << 14
    #: bytes per ranked item of a selection read by several kernels: the largest kernel's
    #: ``ranked_bytes``, ``selection_bytes_per_kernel`` more per other kernel (each lets its
    #: arrays go before the next runs), ``selection_bytes_masked`` more with a mask (the
    #: membership and its cast, the masked ideal ranking)
    selection_bytes_per_kernel: int = 4
    selection_bytes_masked: int = 20
    #: while a batch goes in blocks, a block's scratch tiles hold at most a
    #: ``block_tile_share``-th of the batch's values (``Context.tile_cap``): a block's own
    #: thresholds would let a masked top-k copy the block whole
    block_tile_share: int = 16
    #: blocks of at most a ``host_blocks``-th of the rows run on the host ops (numpy views of
    #: the batch's arrays): their numpy temporaries, a few of the block's size, stay small
    host_blocks: int = 16

    # -- the selection (core/lists/selection.py) ---------------------------------------------
    #: ``Selection.ideal(prefix=True)`` cuts the ideal ranking after its last nonzero column
    #: from this many ranked items on (whole lists); below it the host read costs more than
    #: it saves
    ideal_prefix_from: int = 1024
    #: the per-row passes over every item of the batch (per-item weights, a callable gain's
    #: ideal ranking) go in blocks of rows from this many values on, where values are read
    #: back (eager): each block at most a ``row_block_share``-th of the batch and
    #: ``row_block_max`` values, so its few float64 temporaries stay a small share of the
    #: scores' bytes
    row_blocks_from: int = 1 << 16
    row_block_share: int = 128
    row_block_max: int = 1 << 18

    # -- the top-k selection (core/topk.py) ---------------------------------------------------
    #: the rows of one tile of the boundary pass of the in-place ``"first"`` order: at most a
    #: ``first_share``-th of the batch's values (at least one row), a few bytes per value each
    first_share: int = 128
    #: the tied rows are ordered in pieces whose temporaries (the sort of their top-(k + 1)
    #: values and indices, the group at place k: at most ``tie_bytes`` per selected item) hold
    #: at most a ``tie_share``-th of the batch's scores (``Context.tile_cap`` values where the
    #: batch goes in blocks: a 16th of the batch's), at least ``tie_items_min`` selected items
    tie_bytes: int = 48
    tie_share: int = 16
    tie_items_min: int = 1 << 12

    # -- the kernels' shared passes (core/lists/chance.py, auc.py, ndcg.py) ------------------
    #: the most values one row tile of a chance pass holds where values are read back (the
    #: gains of the labels, the ``(B, K)`` products over the ranks), and the share of the batch
    #: at most; a block of nonzero items holds at most a ``chance_block_share``-th of a row
    #: tile's values (each item takes up to five 8-byte values at once in the block's passes)
    chance_tile_values: int = 1 << 18
    chance_share: int = 32
    chance_block_share: int = 4
    #: from ``auc_block_from`` scores on (eager), the per-list AUC sorts the lists in
    #: ``auc_blocks`` blocks of rows: each block's sort makes about a dozen float64 and int64
    #: temporaries of its size
    auc_block_from: int = 1 << 16
    auc_blocks: int = 256
    #: up to this many ranked labels per batch nDCG's ranked and ideal labels go through the
    #: gains stacked (fewer small calls); past it the copy would cost more than the calls saved
    ndcg_stacked: int = 1 << 16

    # -- the rank family (core/ranks/term_table.py, tasks.py) ---------------------------------
    #: expectation terms come from a cached per-N table up to ``table_max`` list width, else
    #: per task (``RankKernel(table_max=...)``'s default); the table is built ``table_chunk``
    #: widths at a time; where values are read back, a table of more than ``dense_table_max``
    #: terms (widths x columns) is replaced by rows for the candidate counts seen (a 256 x
    #: 20,000 batch's table of 31 columns would hold a quarter of its scores' bytes)
    table_max: int = 1 << 17
    table_chunk: int = 1 << 11
    dense_table_max: int = 1 << 16
    #: below this many scores, a masked batch with several positives in a row is masked once
    #: for all its passes (one copy of at most 4 MiB of float32); from it on each pass masks
    #: its own tiles
    one_masked_copy_below: int = 1 << 20

    # -- the torch backend (core/backends/torch.py) -------------------------------------------
    #: below this many elements the plain ops win on CPU (fewer calls; no buffer pass to save)
    small: int = 1 << 16
    #: below this many elements the counting passes take the plain ops: a comparison into a
    #: bool tensor and its sum cost 1.3x a comparison into a float workspace tile and its sum
    #: at 32 x 100 and 5x at 10 x 5,000 (one thread), so only tiny inputs
    small_count: int = 1 << 12
    #: the most values one tile of a counting pass holds (8 MiB of float32). Measured on the
    #: CPU: on one thread any tile from 2^17 values on is faster than one pass over the whole
    #: array (it stays in cache); on several threads every op is a parallel region, and on a
    #: busy machine each costs a wait for its slowest thread, so few large tiles
    tile: int = 1 << 21
    #: the fewest values of a tile (1 MiB of float32): each tile costs every op of a pass once
    #: more (measured: a rank update at 256 x 5,000 with a few positives per row made some
    #: 1,500 calls in tiles of a sixteenth, 1.8x its time in one pass)
    min_tile: int = 1 << 18
    #: the fewest values of a tile of a list metric's counts of relevant items and masked row
    #: sums (128 KiB of float32); the rank metrics' passes keep ``min_tile``
    count_tile: int = 1 << 15
    #: a list metric's counting passes and, in narrow lists, its masked ``topk`` go in tiles
    #: of a ``list_share``-th of the batch, at least the smaller of ``list_tile`` values and an
    #: eighth of it: at 2^21 scores and up the tile is at most a 16th of them, leaving the rest
    #: of the quarter an update may hold to the selection (measured on one thread: no update
    #: slower at 2,048 x 1,024, 256 x 5,000 or 1,024 x 20,000 than in tiles of an eighth)
    list_share: int = 32
    list_tile: int = 1 << 17
    #: the fewest values of a tile of the tie pass (``tie_sums``): where every item of a tile
    #: ties, its tied items' indices take 16 bytes each
    tie_tile: int = 1 << 16
    #: below this many values a masked ``topk`` masks a copy of the whole array (at most 4 MiB
    #: of float32; measured at 256 x 1,000: tiles 1.7x one masked copy); from it on, tiles of an
    #: eighth of the batch, or for a top 1 or 2 of a ``topk_share``-th (at least ``min_tile``
    #: values), or in a narrow list of the list metrics' tile (measured at 256 x 20,000 with
    #: ``k = 21``: tiles of a 32nd cost 3-10% more than tiles of an eighth)
    tiled_topk: int = 1 << 20
    topk_share: int = 32
    #: values of a mask multiplied at once (its float copy, 256 KiB of float32)
    mask_piece: int = 1 << 16
    #: batches of at most this many scores are computed on numpy views of the tensors when
    #: they are on the CPU (``TorchOps.host``): measured, the list metrics' updates are faster
    #: so up to about 128k values (at 32 x 100 about 1.7x), slower past 256k (one thread)
    host: int = 1 << 17
    #: the most values of a tile of ``TorchOps.gain_sums`` (512 KiB of float32): its six
    #: passes over a tile stay in cache (measured on one thread at 1,024 x 20,000: 2^17 to 2^18
    #: values about 0.6x the time of tiles of 2^21)
    gain_tile: int = 1 << 17
    #: the host ops take torch's scan from this many values on (numpy's along the rows runs
    #: item by item: 10 x 1,000 float64 23 us against 7 us; 32 x 10 about equal)
    host_cumsum_from: int = 1024

    # -- the numpy backend (core/backends/numpy.py) -------------------------------------------
    #: from this many values, ``NumpyOps.take_along`` reads rows of a contiguous array at flat
    #: positions (measured: 10 x 1,000 of 10 x 5,000 float32 12 us against 25 us for the
    #: indexed rows; 32 x 10 of 32 x 100, 3.1 us against 2.1 us)
    flat_take: int = 1 << 11
    #: its masked passes go in blocks of rows of at most ``numpy_tile_max`` values and a
    #: ``numpy_tile_share``-th of the batch, at least ``numpy_tile_min``
    numpy_tile_max: int = 1 << 20
    numpy_tile_share: int = 16
    numpy_tile_min: int = 1 << 12

    # -- the torchmetrics adapter's flat items (adapters/torchmetrics_flat.py) ---------------
    #: ready for that module's ``CHUNK``, ``DENSE_TOP_K``, ``DENSE_WHOLE`` (still its own
    #: constants: another change moves them here): rows of at most ``flat_chunk`` values at a
    #: time; the dense path's bounds
    flat_chunk: int = 1 << 16
    flat_dense_top_k: int = 8
    flat_dense_whole: int = 32

    # -- rankstream.catalog: top_k_ids over a catalog split over processes -------------------------
    #: the buckets of one round of the histogram of the shards' starts that gives each process its
    #: slot in the merge (a float64 array of this many numbers per reduction and bucket refined)
    shard_slot_buckets: int = 256

    # -- PyKEEN models over slices of entities (pykeen_catalog.py) ----------------------------
    #: bytes per query and entity of a slice's scoring by default, per unit of an entity's
    #: representation size: PyKEEN's interactions broadcast a ``(batch, slice, dim)`` block
    #: (``h * r * t``, ``h + r - t``; float32, or complex: 8)
    interaction_bytes: int = 8

    # -- the whole catalog (core/backends/catalog/, core/backends/keras_catalog.py) ----------
    #: the bytes one chunk of scores and its temporaries may hold by default (``memory=`` of
    #: ``rankstream.catalog``; ``chunk_size=`` sets the items per chunk instead), at
    #: ``catalog_bytes_per_score`` per score: the score (4 or 8 bytes), its comparison flags, and
    #: a share of the candidate arrays (index and value of a score at or above a query's
    #: lowest counted band edge)
    catalog_memory: int = 256 << 20
    catalog_bytes_per_score: int = 24
    #: the most scores one chunk holds whatever the budget: a chunk of 1,024 queries x 10,922
    #: items (44 MiB, what 256 MiB allow) ran its matrix product 2.4 to 3.3 times slower than
    #: chunks of 4,096 items (16 MiB) on one thread (1,024 x 100,000 x 64), and the counting
    #: 12-37% slower end to end: the product's output and the comparisons stay in the caches
    catalog_max_chunk_scores: int = 4 << 20
    #: the fewest items of a chunk when the budget allows fewer (one query row of scores)
    catalog_min_chunk: int = 1
    #: the bytes of one block of rows' comparison flags (a byte per score and band edge: the
    #: candidate threshold and each dense slot's two edges); a chunk is compared a block of rows
    #: at a time, and at most as many slots dense as one row's flags fit in these bytes
    catalog_flag_bytes: int = 4 << 20
    #: and at most this many bytes per score of the chunk (a small chunk's budget holds)
    catalog_flag_bytes_per_score: int = 4
    #: what one candidate costs to find and place among its query's band edges, in comparisons
    #: of one score with one edge of the dense pass (which decides how many of a query's lowest
    #: slots are counted dense): about 20 ns against 0.07 ns on an idle core; measured end to end
    #: on a loaded 2-core machine (1,024 x 100,000, trained placement, one thread), 600 ran
    #: 5-10% faster than 300 or 1,000 at 64 and 256 dimensions; with the fused comparisons
    #: (CPU time, 1,024 x 200,000 x 64) 300 / 600 / 1,200 / 2,400 ran 2.21x / 2.16x / 2.23x / 2.33x
    catalog_candidate_cost: int = 600
    #: the first chunk's split is estimated on every ``catalog_sample_step``-th of its items
    catalog_sample_step: int = 16
    #: the values of the ``(candidates, slots)`` arrays that place a block of candidates
    catalog_candidate_values: int = 1 << 20
    #: chunks between two returns of the C heap's freed pages to the system
    #: (``counting.release_freed``: glibc's ``malloc_trim``, about 4 ms each)
    catalog_trim_every: int = 64
    #: count each chunk in one compiled pass per query row (``core/backends/catalog/fused.py``)
    #: where numba is installed (``pip install rankstream[fast]``); False: numpy's passes
    catalog_fused: bool = True
    #: the compiled pass's split of a row into dense slots and candidates (``fused_kernels._split``):
    #: a dense slot's two vectorised comparisons per score cost this fraction of a candidate's
    #: gathering (end to end, CPU time, 1,024 x 200,000, one thread, the floor's multiple:
    #: 0.005 / 0.01 / 0.02 ran 1.25 / 1.28 / 1.28x at 64 dimensions and 1.09 / 1.08 / 1.09x at
    #: 256, trained placement; 0.002 / 0.005 / 0.01 / 0.02 ran 1.51 / 1.52 / 1.56 / 1.59x at 64
    #: dimensions, random placement)
    catalog_fused_dense_cost: float = 0.005
    #: the scores of a row the compiled pass reads at a time (its dense slots' loops and the
    #: candidates' scan over them while they are in the L1 cache: a 16,384-item row read once
    #: per dense slot ran 5 times slower than in tiles)
    catalog_fused_tile: int = 2048
    #: the room for kept scores (inside a band) the compiled pass starts with; a chunk that keeps
    #: more is counted again with room for all (the room then stays for the next chunks)
    catalog_fused_kept: int = 1024
    #: the relevant items' scores alone (``EmbeddingScorer.relevant_each``) are taken for as many
    #: queries at a time as make this many float64 values of ``(queries, slots, dim)``: one
    #: ``(1024, 10, 256)`` batch at once (20 MB of fresh float64 pages, torch's ``items[ids]``)
    #: took 35 ms of an update, in blocks with ``index_select`` and ``bmm`` 12 ms (CPU time)
    catalog_relevant_values: int = 1 << 16
    #: for a user's scorer, the relative half-width of the band around a relevant item's
    #: score (taken once for the batch) inside which a catalog score is kept aside and compared
    #: with the exact score of the item's own chunk (embeddings take the dot product's rounding
    #: bound instead)
    catalog_callable_band: float = 1e-4
    #: Keras ``FactorizedTopK`` and the Keras catalog metrics: candidates scored at a time
    #: (``DEFAULT_CHUNK_SIZE``; with 1,024 queries a float32 chunk is 16 MiB, eagerly with its
    #: comparisons at most about 64 MiB)
    keras_catalog_chunk: int = 4096


#: today's sizes (each measured where it was introduced)
SIZES = Sizes()
