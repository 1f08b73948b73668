"""The Keras BeyondMetrics: compile + evaluate (on the torch backend the compiled model as
it is; on TensorFlow with run_eagerly=True, as the metric reads the ranked ids back) equals the
core BeyondAccuracy over the model's predictions' stable top ids. On JAX, whose evaluate hands
the metric traced values even with run_eagerly=True, it raises, naming the cause."""

import keras
import numpy as np
import pytest

from rankstream.adapters.keras_beyond import BeyondMetrics
from rankstream.core.beyond import BeyondAccuracy, ItemData


def test_compile_evaluate():
    rng = np.random.default_rng(0)
    n = 12
    items = ItemData(popularity=rng.integers(0, 20, n), num_users=25, categories=rng.integers(0, 3, n))
    x = rng.normal(size=(40, 3)).astype("float32")
    y = (rng.random((40, n)) > 0.7).astype("float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(n)])
    names = ["coverage@4", "personalization@4", "novelty@4", "diversity@4"]
    metric = BeyondMetrics(names, items=items)
    backend = keras.backend.backend()
    model.compile(loss="mse", metrics=[metric], run_eagerly=backend == "tensorflow")
    if backend == "jax":
        with pytest.raises(ValueError, match="run it eagerly"):
            model.evaluate(x, y, batch_size=16, verbose=0)
        return
    got = model.evaluate(x, y, batch_size=16, return_dict=True, verbose=0)
    ref = BeyondAccuracy(items, ["coverage", "personalization", "novelty", "diversity"], top_k=4)
    scores = keras.ops.convert_to_numpy(model.predict(x, verbose=0))
    ref.update(np.argsort(-scores, axis=1, kind="stable")[:, :4])
    for key, value in ref.compute().items():
        np.testing.assert_allclose(got[key], value, rtol=1e-5, err_msg=key)
