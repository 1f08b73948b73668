"""A small learning-to-rank model in Keras 3 with rankstream's nDCG@k and MAP@k compiled in.

Each example is a list of 20 candidate items (8 features each) with graded relevance labels
0..3; -1 marks padding (lists shorter than 20). The model scores every item with the same
small MLP; ``rankstream.keras.NDCG`` / ``MAP`` (drop-ins for ``keras_rs.metrics.NDCG`` /
``MeanAveragePrecision``) are reported by ``fit`` and ``evaluate``.

Run with any backend: ``KERAS_BACKEND=jax python examples/keras_ranking.py`` (torch by default).
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras
import numpy as np

from rankstream.keras import MAP, NDCG

LIST_SIZE, FEATURES = 20, 8


def make_lists(n_lists: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Features and graded labels from a hidden linear utility; padded tails labelled -1."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_lists, LIST_SIZE, FEATURES)).astype("float32")
    utility = x @ np.linspace(1.0, -0.5, FEATURES) + 0.5 * rng.normal(size=(n_lists, LIST_SIZE))
    labels = np.digitize(utility, [0.5, 1.5, 2.5]).astype("float32")  # 0..3
    lengths = rng.integers(10, LIST_SIZE + 1, n_lists)
    labels[np.arange(LIST_SIZE)[None, :] >= lengths[:, None]] = -1.0  # padding
    return x, labels


def build_model() -> keras.Model:
    items = keras.Input((LIST_SIZE, FEATURES))
    h = keras.layers.Dense(16, activation="relu")(items)
    scores = keras.layers.Reshape((LIST_SIZE,))(keras.layers.Dense(1)(h))
    return keras.Model(items, scores)


def main() -> None:
    keras.utils.set_random_seed(0)
    x_train, y_train = make_lists(2000, seed=1)
    x_test, y_test = make_lists(500, seed=2)
    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss="mse",  # a pointwise loss keeps the example dependency-free; any ranking loss works
        metrics=[NDCG(k=5, name="ndcg@5"), NDCG(name="ndcg"), MAP(k=5, name="map@5")],
    )
    print(f"backend: {keras.backend.backend()}")
    history = model.fit(x_train, y_train, batch_size=100, epochs=2, validation_split=0.2, verbose=0)
    for epoch in range(2):
        logs = {k: round(v[epoch], 4) for k, v in history.history.items()}
        print(f"epoch {epoch + 1}: {logs}")
    results = model.evaluate(x_test, y_test, batch_size=100, verbose=0, return_dict=True)
    print("test:", {k: round(v, 4) for k, v in results.items()})


if __name__ == "__main__":
    main()
