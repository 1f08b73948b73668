"""The rank-based family: task ranking, the family registry, the streamed kernel, the closed
and streamed forms of the expectations and variances, and the median histogram."""
