"""The Keras BeyondMetrics inside compiled steps: compile + fit and evaluate (``jit_compile=True``
on JAX and TensorFlow, the compiled model as it is on torch) equal the core BeyondAccuracy over
the model's predictions' top ids with the lower id first among ties (a stable argsort). The
model's weights and inputs are small integers, so its scores hold exact ties that straddle the
cut-offs; a learning rate of 0 keeps the predictions fixed during ``fit``. ``ListMetrics(items=)``
gives the same values beside an accuracy name, in the same compiled steps."""

import keras
import numpy as np

from rankstream.adapters.keras_beyond import BeyondMetrics
from rankstream.adapters.keras_metrics import ListMetrics
from rankstream.core.beyond import BeyondAccuracy, ItemData

NAMES = [
    *("coverage", "entropy", "gini", "personalization", "novelty"),
    *("arp", "aplt", "aclt", "diversity", "ild"),
]


def test_compiled_fit_and_evaluate_equal_the_core():
    rng = np.random.default_rng(0)
    n, ks = 9, (2, 4)
    items = ItemData(
        popularity=rng.integers(0, 20, n),
        num_users=25,
        tail_max_popularity=8,
        categories=rng.integers(0, 3, n),
        embeddings=rng.normal(size=(n, 3)),
    )
    x = rng.integers(-1, 2, (40, 3)).astype("float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(n, use_bias=False)])
    model.layers[0].set_weights([rng.integers(-1, 2, (3, n)).astype("float32")])
    scores = keras.ops.convert_to_numpy(model.predict(x, verbose=0))
    top = np.argsort(-scores, axis=1, kind="stable")
    cut_ties = [scores[i, top[i, k - 1]] == scores[i, top[i, k]] for i in range(40) for k in ks]
    assert any(cut_ties), "no tie straddles a cut-off"
    at = {m: ks[i % 2] for i, m in enumerate(NAMES)}  # each metric at one of the cut-offs
    names = [f"{m}@{k}" for m, k in at.items()]
    backend = keras.backend.backend()
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.0),
        loss="mse",
        metrics=[
            BeyondMetrics(names, items=items),
            # the same names in ListMetrics(items=), beside an accuracy name, which reads as
            # it does without them
            ListMetrics(["ndcg@4", "coverage@2", "ild@4"], shuffle_ties=False, items=items, prefix="lm_"),
            ListMetrics(["ndcg@4"], shuffle_ties=False, prefix="acc_"),
        ],
        jit_compile=backend != "torch",
    )
    y = np.zeros((40, n), "float32")
    fitted = model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0).history
    got = model.evaluate(x, y, batch_size=16, return_dict=True, verbose=0)
    for k in ks:
        ref = BeyondAccuracy(items, [m for m in NAMES if at[m] == k], top_k=k)
        ref.update(top[:, :k])
        for key, value in ref.compute().items():
            np.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-6, err_msg=key)
            np.testing.assert_allclose(fitted[key][-1], value, rtol=1e-5, atol=1e-6, err_msg=key)
            if key in ("coverage@2", "ild@4"):  # ListMetrics(items=)
                np.testing.assert_allclose(got["lm_" + key], value, rtol=1e-5, atol=1e-6, err_msg=key)
    np.testing.assert_allclose(got["lm_ndcg@4"], got["acc_ndcg@4"], rtol=1e-6)
