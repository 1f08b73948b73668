"""Evaluate a small matrix-factorisation recommender with rankstream's Ignite metrics.

Synthetic implicit feedback: users and items have hidden tastes, each user interacts with
~30 items drawn from their preferences; 80% of each user's items train a matrix
factorisation model (BPR loss), 20% are held out. The evaluator scores the whole catalogue
for a batch of users, masks out the items each user already saw in training (the mask is
how "exclude seen items" is spelled), and streams MAP@k and nDCG@k at several k, each with
its standard error over the users and a 95% confidence interval (``confidence=0.95``).

In a terminal, progress bars follow training and each evaluation; when stdout is not a
terminal (a log file, CI), each epoch prints one plain line instead. At the end a table of
the metrics per epoch is printed, then the last epoch's MAP@10 and nDCG@10 with their 95%
intervals, and a plot of MAP@k and nDCG@k against the epoch (each interval a band) is written
as a PNG (matplotlib, from the ``examples`` extra: ``pip install "rankstream[ignite,examples]"``).

Run: ``make demo`` (or ``python examples/ignite_recommender.py [--epochs N] [--plot PATH]``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from ignite.engine import Engine, Events
from ignite.handlers import ProgressBar

from rankstream.ignite import MAP, NDCG

KS = [1, 5, 10, 20]
LEVEL = 0.95  # confidence level of the intervals
# Per epoch: the epoch, then for "MAP" and "NDCG" the engine's lists (ordered by KS) of the
# value ("MAP"), the interval's ends ("MAP_ci_low", "MAP_ci_high") and the lists counted.
History = list[tuple[int, dict[str, list[float]]]]
DEFAULT_PLOT = Path(__file__).resolve().parent.parent / "build" / "demo" / "ignite_recommender.png"


def require_matplotlib() -> None:
    """Fail before training, not after it, when the plot cannot be drawn."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        raise ModuleNotFoundError(
            "examples/ignite_recommender.py draws its plot with matplotlib, which is not installed: "
            'pip install "rankstream[examples]" (or pass --no-plot)'
        ) from err


def plot_history(history: History, path: Path) -> Path:
    """MAP@k and nDCG@k against the epoch (0 = before training), one line per k, as a PNG.

    Around each line a translucent band spans the confidence interval at each epoch.
    """
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global state

    epochs = [epoch for epoch, _ in history]
    fig = Figure(figsize=(9, 3.6), layout="constrained")
    axes = fig.subplots(1, 2, sharex=True)
    for ax, (title, name) in zip(axes, [("MAP@k", "MAP"), ("nDCG@k", "NDCG")], strict=True):
        for j, k in enumerate(KS):
            (line,) = ax.plot(epochs, [m[name][j] for _, m in history], marker="o", label=f"k={k}")
            low = [m[f"{name}_ci_low"][j] for _, m in history]
            high = [m[f"{name}_ci_high"][j] for _, m in history]
            ax.fill_between(epochs, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_title(title)
        ax.set_xlabel("epoch (0: before training)")
        ax.set_xticks(epochs)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"mean over users ({LEVEL:.0%} CI shaded)")
    axes[1].legend(loc="upper left")
    fig.suptitle("Matrix factorisation: held-out items ranked among unseen ones, per epoch")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def make_data(n_users: int = 2000, n_items: int = 1500, dim: int = 8, per_user: int = 30, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    users = torch.randn(n_users, dim, generator=g)
    items = torch.randn(n_items, dim, generator=g)
    popularity = torch.randn(n_items, generator=g) * 1.5
    affinity = users @ items.T / dim**0.5 * 3 + popularity
    chosen = torch.multinomial(torch.softmax(affinity, dim=1), per_user, replacement=False, generator=g)
    order = torch.rand(n_users, per_user, generator=g).argsort(dim=1)
    chosen = torch.gather(chosen, 1, order)
    n_train = int(per_user * 0.8)
    train = torch.zeros(n_users, n_items, dtype=torch.bool)
    test = torch.zeros(n_users, n_items)
    train.scatter_(1, chosen[:, :n_train], True)
    test.scatter_(1, chosen[:, n_train:], 1.0)
    return train, test


class MF(torch.nn.Module):
    def __init__(self, n_users: int, n_items: int, dim: int = 32) -> None:
        super().__init__()
        self.u = torch.nn.Embedding(n_users, dim)
        self.i = torch.nn.Embedding(n_items, dim)
        self.b = torch.nn.Embedding(n_items, 1)
        for p in (self.u.weight, self.i.weight):
            torch.nn.init.normal_(p, std=0.1)
        torch.nn.init.zeros_(self.b.weight)

    def pair(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        return (self.u(users) * self.i(items)).sum(-1) + self.b(items).squeeze(-1)

    def all_items(self, users: torch.Tensor) -> torch.Tensor:
        return self.u(users) @ self.i.weight.T + self.b.weight.T


def main(epochs: int = 5, plot: Path | None = DEFAULT_PLOT) -> None:
    if plot is not None:
        require_matplotlib()
    # Bars only on a terminal: elsewhere tqdm's carriage-return updates become one huge line.
    bars = sys.stdout.isatty() and sys.stderr.isatty()
    torch.manual_seed(0)
    train, test = make_data()
    n_users, n_items = train.shape
    pos_u, pos_i = train.nonzero(as_tuple=True)
    model = MF(n_users, n_items)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)

    def train_step(engine: Engine, idx: torch.Tensor) -> float:
        u, i = pos_u[idx], pos_i[idx]
        j = torch.randint(0, n_items, i.shape)  # sampled negatives (BPR)
        loss = -torch.nn.functional.logsigmoid(model.pair(u, i) - model.pair(u, j)).mean()
        loss = loss + 1e-4 * (model.u(u).pow(2).sum() + model.i(i).pow(2).sum()) / len(u)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    def eval_step(engine: Engine, users: torch.Tensor):
        with torch.no_grad():
            scores = model.all_items(users)
        # Items seen in training are not candidates: mask them out (False = not in the list).
        return scores, test[users], {"mask": ~train[users]}

    trainer = Engine(train_step)
    evaluator = Engine(eval_step)
    for name, metric in {
        "MAP": MAP(top_k=KS, confidence=LEVEL),
        "NDCG": NDCG(top_k=KS, confidence=LEVEL),
    }.items():
        metric.attach(evaluator, name)
    train_bar = ProgressBar(persist=False, desc="train")
    if bars:
        train_bar.attach(trainer, output_transform=lambda loss: {"bpr": loss})
        ProgressBar(persist=False, desc="evaluate").attach(evaluator)

    history: History = []
    losses: list[float] = []
    user_batches = list(torch.arange(n_users).split(256))

    @trainer.on(Events.ITERATION_COMPLETED)
    def record_loss(engine: Engine) -> None:
        losses.append(engine.state.output)

    @trainer.on(Events.STARTED)
    @trainer.on(Events.EPOCH_COMPLETED)
    def evaluate(engine: Engine) -> None:
        m = evaluator.run(user_batches).metrics
        epoch = engine.state.epoch
        history.append((epoch, {key: list(m[key]) for key in m if key.startswith(("MAP", "NDCG"))}))
        loss = f"bpr {sum(losses) / len(losses):.4f}" if losses else "before training"
        losses.clear()
        line = (
            f"epoch {epoch}/{epochs}: {loss}, MAP@10 {m['MAP'][KS.index(10)]:.4f}, "
            f"NDCG@10 {m['NDCG'][KS.index(10)]:.4f} ({time.perf_counter() - t0:.1f} s)"
        )
        if bars:
            train_bar.log_message(line)  # printed above the bars, not through them
        else:
            print(line, flush=True)

    perm_batches = [torch.randperm(len(pos_u))[s : s + 2048] for s in range(0, len(pos_u), 2048)]
    t0 = time.perf_counter()
    trainer.run(perm_batches, max_epochs=epochs)
    elapsed = time.perf_counter() - t0

    header = (
        "epoch | " + " | ".join(f"MAP@{k:<2}" for k in KS) + " | " + " | ".join(f"NDCG@{k:<2}" for k in KS)
    )
    print(f"\nMatrix factorisation, {n_users} users x {n_items} items; held-out items, seen items masked")
    print(header)
    print("-" * len(header))
    for epoch, m in history:
        print(
            f"{epoch if epoch else 'init':>5} | "
            + " | ".join(f"{v:6.4f}" for v in m["MAP"])
            + " | "
            + " | ".join(f"{v:7.4f}" for v in m["NDCG"])
        )
    last, j = history[-1][1], KS.index(10)
    print(f"\nlast epoch, {LEVEL:.0%} confidence intervals over the users (Student's t):")
    for label, name in [("MAP@10 ", "MAP"), ("nDCG@10", "NDCG")]:
        print(
            f"{label} {last[name][j]:.4f} ({LEVEL:.0%} CI {last[f'{name}_ci_low'][j]:.4f}-"
            f"{last[f'{name}_ci_high'][j]:.4f}, {last[f'{name}_count'][j]:.0f} users)"
        )
    print(f"({epochs} epochs of training and evaluation in {elapsed:.1f} s)")
    if plot is not None:
        print(f"plot of MAP@k and NDCG@k per epoch: {plot_history(history, plot)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument(
        "--plot", type=Path, default=DEFAULT_PLOT, help=f"PNG to write (default {DEFAULT_PLOT})"
    )
    parser.add_argument("--no-plot", action="store_true", help="skip the plot (no matplotlib needed)")
    args = parser.parse_args()
    main(args.epochs, None if args.no_plot else args.plot)
