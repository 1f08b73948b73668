"""One Keras configuration (backend x device count x state dtype), run in its own process by
``tests/keras/test_keras_distributed.py`` (``KERAS_BACKEND``, ``XLA_FLAGS`` and
``JAX_ENABLE_X64`` are read at import, so each configuration needs a fresh interpreter).

    KERAS_BACKEND=jax XLA_FLAGS=--xla_force_host_platform_device_count=4 \\
        python tests/keras/distributed/worker.py '{"devices": 4, "ckpt_out": "/tmp/ck"}'

* JAX, ``devices > 1``: ``keras.distribution.DataParallel`` over that many CPU devices.
* TensorFlow, ``devices > 1``: ``tf.distribute.MirroredStrategy`` over that many logical CPUs;
  models are built, compiled and loaded under ``strategy.scope()``.
* ``devices == 1``: no distribution (the single-device run the others are compared with).

Every metric of ``cases.METRICS`` is compiled into the models. The worker records what Keras
reports (evaluate/fit logs, metric variables, errors it raised) and prints one line
``RESULT <json>``; it computes no expected value (the test does, from the same data).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases

SPEC = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
DEVICES = int(SPEC.get("devices", 1))
BACKEND = os.environ.get("KERAS_BACKEND")

if BACKEND == "tensorflow":  # logical CPUs must be configured before TF initialises devices
    import tensorflow as tf

    if DEVICES > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * DEVICES)

import keras  # noqa: E402
from keras import ops as K  # noqa: E402

import rankstream.keras as rk  # noqa: E402
from rankstream.keras import KernelMetric  # noqa: E402

assert keras.backend.backend() == BACKEND, (keras.backend.backend(), BACKEND)

STRATEGY = None
DISTRIBUTION = None
if BACKEND == "tensorflow" and DEVICES > 1:
    STRATEGY = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(DEVICES)])
    assert STRATEGY.num_replicas_in_sync == DEVICES
elif BACKEND == "jax" and DEVICES > 1:
    cpus = keras.distribution.list_devices("cpu")
    assert len(cpus) >= DEVICES, f"need {DEVICES} CPU devices, XLA_FLAGS gives {cpus}"
    DISTRIBUTION = keras.distribution.DataParallel(devices=cpus[:DEVICES])
    keras.distribution.set_distribution(DISTRIBUTION)


def scope():
    return STRATEGY.scope() if STRATEGY is not None else contextlib.nullcontext()


# -- the metrics under test ------------------------------------------------------------------


def best_item(labels, mask=None):
    """``cases.best_item`` in keras.ops: the index of each list's highest label."""
    y = K.cast(labels, "float32")
    if mask is not None:
        y = K.where(K.cast(mask, "bool"), y, -2.0)
    y = y - 1e-3 * K.cast(K.arange(y.shape[-1]), "float32")
    return K.cast(K.argmax(y, axis=-1), "int32")


_INDEX_TARGET: dict[type, type] = {}


def index_target(cls: type) -> type:
    """``cls`` (a rank-based metric) fed the index of each list's best item, from the graded
    labels every model here is given (y_true ``labels`` or ``{"labels", "mask"}``). Only the
    input changes hands; update, state and result are ``cls``'s. Registered, so that a saved
    model holding it loads."""
    if cls not in _INDEX_TARGET:

        class IndexTarget(cls):
            def update_state(self, y_true, y_pred, sample_weight=None):
                if isinstance(y_true, dict):
                    y_true = {"labels": best_item(y_true["labels"], y_true["mask"]), "mask": y_true["mask"]}
                else:
                    y_true = best_item(y_true)
                return super().update_state(y_true, y_pred, sample_weight)

        IndexTarget.__name__ = IndexTarget.__qualname__ = f"IndexTarget{cls.__name__}"
        _INDEX_TARGET[cls] = keras.saving.register_keras_serializable(package="rankstream_tests")(IndexTarget)
    return _INDEX_TARGET[cls]


def make_metrics(prefix: str = "", float32_state: bool = False, only=None) -> list:
    """The registry's metrics (those for which ``only(m)`` holds), named ``prefix + m.name``,
    created in the strategy's scope (TF: metric variables made outside it are plain variables,
    not per-replica ones). ``float32_state``: the float32 state with Kahan compensation that
    the adapter picks where the backend has no float64 (JAX without x64), asked for with
    ``state_dtype="float32"``."""
    out = []
    with scope():
        for m in cases.METRICS:
            if only is not None and not only(m):
                continue
            metric = eval(m.make, {"rk": rk})  # the registry's one-line constructor
            config = {**metric.get_config(), "name": prefix + m.name}
            if float32_state:
                config["state_dtype"] = "float32"
            if "prefix" in config:  # a dict result: log "{name}.{key}"
                config["prefix"] = f"{prefix}{m.name}."
            cls = index_target(type(metric)) if m.target == "index" else type(metric)
            metric = cls.from_config(config)
            if float32_state:
                assert all(str(v.dtype) == "float32" for v in metric.variables if "seed" not in v.path)
            out.append(metric)
    return out


def floats(logs: dict) -> dict:
    return {k: float(v) for k, v in logs.items()}


def state_of(model, names) -> dict:
    """The metric variables of the named metrics (read in cross-replica context: summed)."""
    return {v.path: _numpy(v).tolist() for v in _vars(model, names)}


def _numpy(v) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(keras.ops.convert_to_tensor(v)))


def _vars(model, names):
    return [v for v in model.metrics_variables if v.path.split("/")[0] in names]


class RestoreMetricState(keras.callbacks.Callback):
    """Assigns saved metric variables after ``evaluate`` has reset them and before its first
    step: ``evaluate`` then continues an interrupted evaluation. The compiled metrics must be
    built by then (a model fresh from ``load_model`` builds them in its first evaluate, after
    this hook on the TF backend: evaluate one batch first)."""

    def __init__(self, state: dict) -> None:
        super().__init__()
        self.state = state
        self.restored = 0

    def on_test_batch_begin(self, batch, logs=None):
        if batch != 0:
            return
        for v in self.model.metrics_variables:
            if v.path in self.state:
                v.assign(np.asarray(self.state[v.path], dtype=v.dtype))
                self.restored += 1
        if self.restored != len(self.state):
            paths = [v.path for v in self.model.metrics_variables]
            raise RuntimeError(f"restored {self.restored} of {len(self.state)} variables; model has {paths}")


def attempt(fn):
    """``{"ok": result}`` or ``{"error": "Type: message"}`` (for what Keras may refuse)."""
    try:
        return {"ok": fn()}
    except Exception as e:  # recorded and asserted on by the test
        return {"error": f"{type(e).__name__}: {str(e)[:400]}"}


# -- models --------------------------------------------------------------------------------


# Metric groups of the ``inputs`` task: name prefix -> what the metric reads from ``y``.
GROUPS = {"lw_": "list_w", "iw_": "item_w", "mk_": "mask"}
GROUP_ONLY = {"lw_": None, "iw_": lambda m: m.item_weights, "mk_": None}


class IdentityRanker(keras.Model):
    """y_pred = the scores given as x, so the expected values are computable exactly; no loss
    (Keras' losses do not take item-level (batch, list_size) sample weights under TF).

    ``ranking_metrics`` are held by the model and updated in ``compute_metrics`` (the Keras
    custom-metric pattern) from ``y = {"labels", "mask", "list_w", "item_w"}``, each reading
    what its name's prefix (``GROUPS``) says: so one step covers every kind of input. Compiled
    metrics could not take a mask: Keras flattens a dict ``y_true`` of a single-output model
    and hands each metric its first leaf only."""

    def __init__(self, ranking_metrics=(), **kwargs):
        super().__init__(**kwargs)
        self.ranking_metrics = list(ranking_metrics)

    def call(self, x):
        return x

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        return keras.ops.sum(y_pred * 0.0)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if not self.ranking_metrics:
            return super().compute_metrics(x, y, y_pred, sample_weight)
        for m in self.ranking_metrics:
            kind = GROUPS[m.name[:3]]
            if kind == "mask":
                m.update_state({"labels": y["labels"], "mask": y["mask"]}, y_pred)
            else:
                m.update_state(y["labels"], y_pred, sample_weight=y[kind])
        return self.get_metrics_result()


def identity_model(weighted=(), ranking_metrics=()) -> keras.Model:
    """``weighted``: compiled as ``weighted_metrics`` (Keras hands them ``sample_weight``
    when there is one, None otherwise)."""
    with scope():
        model = IdentityRanker(ranking_metrics)
        model.compile(weighted_metrics=list(weighted) or None)
    return model


@keras.saving.register_keras_serializable(package="rankstream_tests")
class NearTies(keras.metrics.Metric):
    """How many pairs of items of one list the model scored less than ``cases.MIN_GAP`` apart
    (summed over the batches and replicas): 0 means the order of every list the metrics saw
    is the same on every computation path (see ``cases.MIN_GAP``)."""

    def __init__(self, name="near_ties", **kwargs):
        super().__init__(name=name, **kwargs)
        self.pairs = self.add_variable(shape=(), initializer="zeros", name="pairs", aggregation="sum")

    def update_state(self, y_true, y_pred, sample_weight=None):
        s = K.cast(y_pred, "float32")
        close = K.cast(K.abs(s[:, :, None] - s[:, None, :]) < cases.MIN_GAP, "float32")
        off_diagonal = 1.0 - K.eye(cases.LIST_SIZE, dtype="float32")
        self.pairs.assign_add(K.sum(close * off_diagonal) / 2.0)

    def result(self):
        return K.add(self.pairs, 0.0)  # a value, not the variable (TF: history read it later)


def dense_ranker() -> keras.Model:
    with scope():
        inp = keras.Input((cases.LIST_SIZE, cases.FEATURES))
        h = keras.layers.Dense(4, activation="tanh")(inp)
        out = keras.layers.Reshape((cases.LIST_SIZE,))(keras.layers.Dense(1)(h))
        model = keras.Model(inp, out)
        model.compile(keras.optimizers.SGD(0.05), "mse", metrics=[*make_metrics(), NearTies()])
    return model


# -- tasks ---------------------------------------------------------------------------------


def evidence(model) -> dict:
    """Where the metric state lives and how it aggregates."""
    names = {m.name for m in cases.METRICS}
    ours = _vars(model, names)
    out = {
        "backend": BACKEND,
        "devices": DEVICES,
        "aggregations": sorted({str(v.aggregation) for v in ours}),
        "state_dtypes": sorted({str(v.dtype) for v in ours}),
        "n_variables": len(ours),
    }
    if BACKEND == "jax":
        import jax

        out["jax_devices"] = len(jax.devices())
        out["x64"] = bool(jax.config.jax_enable_x64)
        out["variable_devices"] = sorted({len(v.value.sharding.device_set) for v in ours})
        if DISTRIBUTION is not None:
            layout = DISTRIBUTION.get_data_layout((cases.BATCH, cases.LIST_SIZE)).backend_layout
            out["batch_sharding"] = str(layout.spec)
    if BACKEND == "tensorflow":
        out["replicas"] = 1 if STRATEGY is None else STRATEGY.num_replicas_in_sync
        out["variable_types"] = sorted({type(v._value).__name__ for v in ours})
    return out


def local_values(model, path: str) -> list | None:
    """Per-replica values of one metric variable (TF MirroredStrategy only)."""
    if STRATEGY is None:
        return None
    (v,) = [v for v in model.metrics_variables if v.path == path]
    return [np.asarray(x).tolist() for x in STRATEGY.experimental_local_results(v._value)]


KW = {"batch_size": cases.BATCH, "verbose": 0, "return_dict": True}
NAMES = {m.name for m in cases.METRICS}


def evaluate(model, x, y, sample_weight=None) -> dict:
    """``model.evaluate`` in batches of BATCH. On TF from a batched ``tf.data.Dataset`` (what
    Keras makes of arrays too), whose unknown batch dimension lets one traced step serve full
    and short batches (from arrays, Keras traces the short last batch again: per replica)."""
    if BACKEND != "tensorflow":
        return floats(model.evaluate(x, y, sample_weight=sample_weight, **KW))
    parts = (x, y) if sample_weight is None else (x, y, sample_weight)
    data = tf.data.Dataset.from_tensor_slices(parts).batch(cases.BATCH)
    return floats(model.evaluate(data, verbose=0, return_dict=True))


def task_evaluate() -> dict:
    """Compiled metrics, padding labels, and a short last global batch."""
    d = cases.eval_data()
    r = cases.eval_data(n_lists=cases.REMAINDER_LISTS)
    p = cases.pad_lists(r, cases.BATCH)
    out = {}
    model = identity_model(make_metrics())
    # sample_weight 1 (keras-rs: as none) here, 0 for the padding lists below: one signature
    out["plain"] = evaluate(model, d["scores"], d["labels"], d["pad_w"])
    out["plain_state"] = state_of(model, NAMES)
    out["evidence"] = evidence(model)
    out["local_weight_sum"] = local_values(model, f"{cases.METRICS[0].name}/weight_sum")
    # The supported way to a last batch the devices cannot split: pad with padding lists
    # (labels -1; weight 0 for the rank-based metrics, which have no notion of padding).
    out["remainder_padded"] = evaluate(model, p["scores"], p["labels"], p["pad_w"])
    if BACKEND == "tensorflow":  # JAX: see task_refusals
        # 4 replicas: the last batch of 9 lists gives the replicas 4, 4, 1 and 0 lists.
        out["remainder"] = evaluate(model, r["scores"], r["labels"], r["pad_w"])
    return out


def task_refusals() -> dict:
    """What Keras may refuse to run distributed, each on a fresh model (after an exception
    inside evaluate, Keras' JAX trainer leaves the model's variables purged), last in the
    process: a global batch the devices cannot split evenly (JAX: 9 lists; TF runs uneven
    batches but the first, see task_evaluate) and a batch size that is not a multiple of the
    device count. The first batch is the odd one, so a refusal comes before any compilation.
    The metric must be exact whenever Keras runs them."""
    short = cases.eval_data(n_lists=cases.SHORT_LISTS)
    d = cases.eval_data()
    odd = {**KW, "batch_size": cases.BATCH - 1}
    out = {
        "odd_batch": attempt(
            lambda: floats(identity_model(make_metrics()).evaluate(d["scores"], d["labels"], **odd))
        )
    }
    if BACKEND == "jax":
        out["short_batch"] = attempt(
            lambda: floats(identity_model(make_metrics()).evaluate(short["scores"], short["labels"], **KW))
        )
    return out


def task_inputs() -> dict:
    """Per-list weights, per-item weights and masks, in one model (one traced step)."""
    metrics = [m for prefix in GROUPS for m in make_metrics(prefix, only=GROUP_ONLY[prefix])]
    model = identity_model(ranking_metrics=metrics)
    out = {}
    for key, d in (
        ("full", cases.eval_data()),
        ("padded", cases.pad_lists(cases.eval_data(n_lists=cases.REMAINDER_LISTS), cases.BATCH)),
    ):
        # A float 0/1 mask (the adapter reads mask != 0): Keras' MirroredStrategy build step
        # averages the first batch over the replicas, which fails on a bool tensor.
        y = {
            "labels": d["labels"],
            "mask": d["mask"].astype("float32"),
            "list_w": d["list_w"],
            "item_w": d["item_w"],
        }
        out[key] = floats(model.evaluate(d["scores"], y, **KW))
    return out


def task_kahan() -> dict:
    """float32 state with compensation (the JAX default without x64) under the configuration's
    engine: totals and compensations after one pass, then restored and continued."""
    d = cases.kahan_data()
    model = identity_model(make_metrics("k_", float32_state=True))
    names = {"k_" + m.name for m in cases.METRICS}
    first = "k_" + cases.METRICS[0].name
    logs = floats(model.evaluate(d["scores"], d["labels"], sample_weight=d["list_w"], **KW))
    state = state_of(model, names)
    out = {
        "logs": logs,
        "state": state,
        "local_weight_sum": local_values(model, f"{first}/weight_sum"),
        "local_weight_sum_compensation": local_values(model, f"{first}/weight_sum_compensation"),
    }
    # Continue from the summed state (TF assigns each replica 1/R of it) over the same lists
    # again, now all weighing 1.
    w1 = np.where(d["list_w"] > 0, 1.0, 0.0).astype("float32")
    assert w1.sum() == cases.KAHAN_BATCHES
    cb = RestoreMetricState(state)
    model.evaluate(d["scores"], d["labels"], sample_weight=w1, callbacks=[cb], **KW)
    out["continued_state"] = state_of(model, names)
    out["restored_variables"] = cb.restored
    return out


def task_fit() -> dict:
    keras.utils.set_random_seed(0)
    x, y = cases.fit_data(1, 64)
    xv, yv = cases.fit_data(2, cases.VAL_LISTS)
    model = dense_ranker()
    history = model.fit(
        x, y, batch_size=cases.BATCH, epochs=2, validation_data=(xv, yv), shuffle=False, verbose=0
    )
    out = {
        "history": {k: [float(v) for v in vs] for k, vs in history.history.items()},
        # the test scores the validation lists with these (numpy), for the naive reference
        "weights": [np.asarray(w, dtype=np.float64).tolist() for w in model.get_weights()],
    }
    # Checkpoint mid-evaluation: evaluate the first CKPT_SPLIT validation lists, save the model
    # (.keras: weights + compiled metric configs) and the metric variables, reload, continue.
    out["uninterrupted"] = floats(model.evaluate(xv, yv, **KW))
    head = slice(0, cases.CKPT_SPLIT)
    out["first_part"] = floats(model.evaluate(xv[head], yv[head], **KW))
    state = state_of(model, NAMES)
    out["n_state"] = len(state)
    if SPEC.get("ckpt_out"):
        os.makedirs(SPEC["ckpt_out"], exist_ok=True)
        model.save(os.path.join(SPEC["ckpt_out"], "model.keras"))
        with open(os.path.join(SPEC["ckpt_out"], "metric_state.json"), "w") as f:
            json.dump(state, f)
    out["resumed_here"] = resume(model_path=None, state=state, model=model)
    if SPEC.get("ckpt_out") and not SPEC.get("resume_from"):
        out["reloaded_here"] = resume(os.path.join(SPEC["ckpt_out"], "model.keras"), state)
    if SPEC.get("resume_from"):
        with open(os.path.join(SPEC["resume_from"], "metric_state.json")) as f:
            other = json.load(f)
        out["resumed_other"] = resume(os.path.join(SPEC["resume_from"], "model.keras"), other)
    return out


def resume(model_path, state, model=None) -> dict:
    xv, yv = cases.fit_data(2, cases.VAL_LISTS)
    if model is None:
        with scope():
            model = keras.models.load_model(model_path)
        model.evaluate(xv[: cases.BATCH], yv[: cases.BATCH], **KW)  # builds the compiled metrics
    cb = RestoreMetricState(state)
    tail = slice(cases.CKPT_SPLIT, None)
    logs = floats(model.evaluate(xv[tail], yv[tail], callbacks=[cb], **KW))
    configs = sorted(
        json.dumps(m.get_config(), sort_keys=True, default=str)
        for m in _flat_metrics(model)
        if isinstance(m, KernelMetric)
    )
    return {"logs": logs, "restored_variables": cb.restored, "n_metrics": len(configs), "configs": configs}


def _flat_metrics(model):
    out, todo = [], list(model.metrics)
    while todo:
        m = todo.pop()
        out.append(m)
        todo.extend(getattr(m, "metrics", []) or [])
    return out


TASKS = {
    "evaluate": task_evaluate,
    "inputs": task_inputs,
    "kahan": task_kahan,
    "fit": task_fit,
    "refusals": task_refusals,
}


def main() -> None:
    result = {"spec": SPEC, "seconds": {}}
    for name in SPEC.get("tasks", list(TASKS)):
        t0 = time.perf_counter()
        try:
            result[name] = TASKS[name]()
        except Exception:
            result[name] = {"crashed": traceback.format_exc()}
        result["seconds"][name] = round(time.perf_counter() - t0, 2)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
