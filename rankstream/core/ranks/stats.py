"""The rank family's statistics under their former single name, re-exported: the series
(:mod:`~rankstream.core.ranks.series`), the closed forms
(:mod:`~rankstream.core.ranks.closed_forms`), the streamed forms
(:mod:`~rankstream.core.ranks.streamed_forms`) and the median histogram
(:mod:`~rankstream.core.ranks.median`)."""

from __future__ import annotations

from rankstream.core.ranks import closed_forms, median, series, streamed_forms
from rankstream.core.ranks.closed_forms import *  # noqa: F403
from rankstream.core.ranks.median import *  # noqa: F403
from rankstream.core.ranks.series import *  # noqa: F403
from rankstream.core.ranks.series import _zeta_neg_plus_half as _zeta_neg_plus_half
from rankstream.core.ranks.streamed_forms import *  # noqa: F403

__all__ = sorted({*series.__all__, *closed_forms.__all__, *streamed_forms.__all__, *median.__all__})
