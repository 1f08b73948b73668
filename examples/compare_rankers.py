"""Compare two recommenders on the same users in one Ignite ``Engine`` pass: is the difference
noise?

Synthetic implicit feedback: users and items have hidden tastes and items a popularity; each user
interacts with ~30 items drawn from their preferences, 80% of them seen (training), 20% held out.
Two rankers score the whole catalogue for a batch of users, with the items each user has seen
masked out:

* ``itemknn``: item-based collaborative filtering, the sum of the cosine similarities (over
  the users' seen items) between an item and the items the user has seen;
* ``popularity``: how many users have seen the item (the same list for everyone).

``rankstream.ignite.PairedComparison`` streams, per metric, the sums of the per-user differences
of the two rankers' values (constant memory, one pass), and prints each ranker's mean, the mean
difference, its 95% confidence interval and the paired t-test's p-value.

Run: ``python examples/compare_rankers.py [--users N]``.
"""

from __future__ import annotations

import argparse

import torch
from ignite.engine import Engine

from rankstream.ignite import PairedComparison

METRICS = ["ndcg@10", "map@10", "recall@20", "mrr@10"]
RANKERS = ["itemknn", "popularity"]


def make_data(n_users: int = 2000, n_items: int = 1000, dim: int = 8, per_user: int = 30, seed: int = 0):
    """``(seen, held_out)``: ``(n_users, n_items)`` bool and float 0/1."""
    g = torch.Generator().manual_seed(seed)
    users = torch.randn(n_users, dim, generator=g)
    items = torch.randn(n_items, dim, generator=g)
    popularity = torch.randn(n_items, generator=g) * 1.5
    affinity = users @ items.T / dim**0.5 * 3 + popularity
    chosen = torch.multinomial(torch.softmax(affinity, dim=1), per_user, replacement=False, generator=g)
    n_seen = int(per_user * 0.8)
    seen = torch.zeros(n_users, n_items, dtype=torch.bool)
    held_out = torch.zeros(n_users, n_items)
    seen.scatter_(1, chosen[:, :n_seen], True)
    held_out.scatter_(1, chosen[:, n_seen:], 1.0)
    return seen, held_out


def make_rankers(seen: torch.Tensor):
    """The two scorers: ``users -> (len(users), n_items)`` scores."""
    x = seen.double()
    counts = x.sum(0)
    norm = counts.clamp(min=1.0).sqrt()
    similarity = (x.T @ x) / norm[:, None] / norm[None, :]
    similarity.fill_diagonal_(0.0)

    def itemknn(users: torch.Tensor) -> torch.Tensor:
        return x[users] @ similarity

    def popularity(users: torch.Tensor) -> torch.Tensor:
        return counts.expand(len(users), -1)

    return {"itemknn": itemknn, "popularity": popularity}


def main(n_users: int = 2000) -> dict[str, float]:
    seen, held_out = make_data(n_users)
    rankers = make_rankers(seen)

    def eval_step(engine: Engine, users: torch.Tensor) -> dict:
        return {
            "y_pred": {name: score(users) for name, score in rankers.items()},
            "y": held_out[users],
            "mask": ~seen[users],  # seen items are not candidates
        }

    evaluator = Engine(eval_step)
    PairedComparison(METRICS, RANKERS).attach(evaluator, "compare")
    results = evaluator.run(list(torch.arange(n_users).split(256))).metrics["compare"]

    a, b = RANKERS
    print(f"{n_users} users, held-out items ranked among the unseen ones; {a} vs {b}, paired over users")
    print(f"{'metric':<10} {a:>9} {b:>10} {'difference':>11}  {'95% CI':<18} {'p-value':>9}")
    for name in METRICS:
        pair = f"{name}/{a}-vs-{b}"
        low, high = results[f"{pair}/ci_low"], results[f"{pair}/ci_high"]
        print(
            f"{name:<10} {results[f'{name}/{a}']:9.4f} {results[f'{name}/{b}']:10.4f} "
            f"{results[f'{pair}/diff']:+11.4f}  [{low:+.4f}, {high:+.4f}] {results[f'{pair}/p_value']:9.2g}"
        )
    print(f"(lists compared per metric: {int(results[f'{METRICS[0]}/count'])})")
    for name in METRICS:  # one machine-readable line per metric
        pair = f"{name}/{a}-vs-{b}"
        stats = [results[f"{pair}/{s}"] for s in ("diff", "ci_low", "ci_high", "p_value")]
        print(f"{pair} [diff, ci_low, ci_high, p_value]: [{', '.join(repr(v) for v in stats)}]")
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=2000)
    main(parser.parse_args().users)
