"""Keras 3 on JAX: evaluate rankstream's nDCG@k / MAP@k data-parallel over 2 CPU devices with
``keras.distribution.DataParallel`` and get the numbers of the single-device run.

The metrics' state is a few sums per metric (Keras variables with ``aggregation="sum"``). Under
``DataParallel`` Keras runs one SPMD program: each device scores its share of a batch, the
batch's sums are reduced over the devices and added to the (replicated) state, so the result
is the single-device one up to float32 rounding. Every global batch must split evenly over the
devices (JAX refuses otherwise): pad the data with lists labelled -1 (padding: no item, so
weight 0 in every list metric) to a multiple of the batch size, as below.

Run: ``python examples/keras_distributed.py`` (2 CPU devices are forced below; on a machine
with accelerators, ``DataParallel()`` without ``devices`` takes them all).
"""

from __future__ import annotations

import os

# Read when JAX / Keras are imported: set them first.
os.environ["KERAS_BACKEND"] = "jax"
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import keras
import numpy as np

from rankstream.keras import MAP, NDCG

LIST_SIZE, NUM_ITEMS, BATCH, DEVICES = 20, 500, 100, 2


def make_lists(n_lists: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Lists of item ids and graded labels 0..3 from a hidden item quality; padded tails
    labelled -1."""
    rng = np.random.default_rng(seed)
    quality = np.random.default_rng(0).normal(size=NUM_ITEMS)
    x = rng.integers(0, NUM_ITEMS, size=(n_lists, LIST_SIZE)).astype("int32")
    utility = quality[x] + 0.5 * rng.normal(size=(n_lists, LIST_SIZE))
    labels = np.digitize(utility, [0.5, 1.5, 2.5]).astype("float32")
    lengths = rng.integers(10, LIST_SIZE + 1, n_lists)
    labels[np.arange(LIST_SIZE)[None, :] >= lengths[:, None]] = -1.0
    return x, labels


def pad_lists(x: np.ndarray, y: np.ndarray, multiple: int) -> tuple[np.ndarray, np.ndarray]:
    """Append all-padding lists (labels -1) up to a multiple of ``multiple`` lists."""
    extra = (-len(y)) % multiple
    x = np.concatenate([x, np.zeros((extra, *x.shape[1:]), x.dtype)])
    y = np.concatenate([y, np.full((extra, *y.shape[1:]), -1.0, y.dtype)])
    return x, y


def build_model() -> keras.Model:
    """A learned score per item: an embedding lookup does no arithmetic, so a list's scores
    are the same floats on one device or two, at any batch size (a matmul's last bits are
    not, and two nearly tied items could swap between the runs compared below)."""
    items = keras.Input((LIST_SIZE,), dtype="int32")
    scores = keras.layers.Reshape((LIST_SIZE,))(keras.layers.Embedding(NUM_ITEMS, 1)(items))
    model = keras.Model(items, scores)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss="mse",
        metrics=[
            NDCG(k=5, shuffle_ties=False, name="ndcg@5"),
            NDCG(shuffle_ties=False, name="ndcg"),
            MAP(k=5, shuffle_ties=False, name="map@5"),
        ],
    )
    return model


def main() -> None:
    keras.utils.set_random_seed(0)
    x_train, y_train = make_lists(2000, seed=1)
    x_test, y_test = make_lists(1234, seed=2)  # 1234 lists: not a multiple of BATCH
    x_test, y_test = pad_lists(x_test, y_test, BATCH)  # 1300: batches of 100 = 2 x 50

    # Single device: train a little, evaluate.
    model = build_model()
    model.fit(x_train, y_train, batch_size=BATCH, epochs=2, verbose=0)
    single = model.evaluate(x_test, y_test, batch_size=BATCH, verbose=0, return_dict=True)

    # Data-parallel over 2 devices: the same weights in a model built under the distribution.
    devices = keras.distribution.list_devices("cpu")[:DEVICES]
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    parallel_model = build_model()
    parallel_model.set_weights(model.get_weights())
    parallel = parallel_model.evaluate(x_test, y_test, batch_size=BATCH, verbose=0, return_dict=True)

    print(f"keras {keras.__version__}, backend {keras.backend.backend()}, DataParallel over {devices}")
    print(f"{'metric':8s} {'1 device':>12s} {f'{DEVICES} devices':>12s} {'|diff|':>9s}")
    for name in ("ndcg@5", "ndcg", "map@5"):
        diff = abs(single[name] - parallel[name])
        print(f"{name:8s} {single[name]:12.7f} {parallel[name]:12.7f} {diff:9.1e}")
        assert diff <= 1e-6 * abs(single[name]) + 1e-7, f"{name}: {single[name]} vs {parallel[name]}"


if __name__ == "__main__":
    main()
