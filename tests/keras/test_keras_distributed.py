"""The Keras metrics on the frameworks' own distributed engines report the single-device numbers.

* JAX: ``keras.distribution.DataParallel`` over 4 CPU devices
  (``XLA_FLAGS=--xla_force_host_platform_device_count=N``), with float32 state and Kahan
  compensation (JAX's default) and with float64 state (``JAX_ENABLE_X64=1``).
* TensorFlow: ``tf.distribute.MirroredStrategy`` over 2 logical CPUs (float64 state;
  the compensated float32 state forced for the Kahan checks).

Each configuration (``CONFIGS``) runs ``distributed/worker.py`` in its own process
(``KERAS_BACKEND``, ``XLA_FLAGS`` and ``JAX_ENABLE_X64`` are fixed at import), one at a time
(``PARALLEL``), in the tests' order, each test waiting for its own process. Expected values:
the naive references of ``distributed/cases.py`` (keras-rs semantics from
``backend_suite/krs_reference.py``, python loops in float64; ranks counted in numpy) and the
single-device run of the same backend. The metrics under test are ``cases.METRICS``, one line
per metric. A failing configuration shows its process output.

Checked: evaluate with the metrics compiled in (padding labels, no or per-list weights, a last
global batch the devices cannot split), per-item weights and masks, fit, the metric variables
(the bag of sums) equal across device counts, the compensated float32 state under replicas, and
a checkpoint taken mid-evaluation (.keras model + metric variables) continued in the same and
in another configuration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent / "distributed"
sys.path.insert(0, str(HERE))

import cases  # noqa: E402
from _hang_guard import HANG_GUARD_S  # noqa: E402
from _hang_guard import run as guarded_run  # noqa: E402

# One worker at a time: on a 2-core box two side by side take as long in all (XLA and the TF
# executor use every core) and MirroredStrategy's replica threads stall when the cores are
# busy. More on a bigger machine (a TF configuration with replicas still runs alone).
PARALLEL = int(os.environ.get("RANKSTREAM_KERAS_DIST_PARALLEL", "1"))
ALL = ("evaluate", "inputs", "kahan", "fit")


@dataclass(frozen=True)
class Config:
    backend: str
    devices: int
    tasks: tuple[str, ...]
    x64: bool = False
    baseline: str | None = None  # the single-device configuration it must agree with
    resume_from: str | None = None  # continue that configuration's checkpoint
    ckpt: bool = False  # write a checkpoint for others to continue
    alone: bool = False  # run with no other worker (MirroredStrategy stalls on busy cores)


# Launch order = test order. JAX runs 4 replicas (DataParallel over 4 CPU devices; 2 check
# nothing 4 do not), TF's MirroredStrategy 2 (it traces a step once per replica, so 4 cost twice
# the time and check nothing 2 do not: a last global batch the replicas cannot split, the sums
# of every replica). Each configuration is one process, its tasks one after the other.
CONFIGS = {
    "jax-1": Config("jax", 1, ("evaluate", "inputs", "fit"), ckpt=True),
    "tf-1": Config("tensorflow", 1, ("evaluate", "inputs", "fit"), ckpt=True),
    "jax-4": Config("jax", 4, (*ALL, "refusals"), baseline="jax-1", resume_from="jax-1"),
    "jax-4-x64": Config("jax", 4, ("evaluate",), x64=True, baseline="jax-1"),
    "tf-2": Config("tensorflow", 2, (*ALL, "refusals"), baseline="tf-1", resume_from="tf-1", alone=True),
}

# float32 results (``result()`` is cast to the metric dtype): one float32 rounding of the
# value, float32 per-list arithmetic where the state is float32.
REL_F64_STATE = 3e-7
REL_F32_STATE = 2e-6
ABS = 1e-6  # derived values near 0 (adjusted indices, z-scores) lose relative precision


# -- running the configurations ------------------------------------------------------------


class Runs:
    """Starts the worker processes (at most PARALLEL at a time, dependencies first) and
    collects their JSON results."""

    def __init__(self, tmp: Path, planned: set[str]) -> None:
        self.tmp = tmp
        self.planned = planned  # started in CONFIGS order, ahead of the tests that need them
        self.running: dict[str, tuple[subprocess.Popen, object, float]] = {}
        self.done: dict[str, dict] = {}
        self.retried: dict[str, str] = {}  # a configuration whose process a signal ended, once

    def _env(self, cfg: Config) -> dict[str, str]:
        env = {
            **os.environ,
            "KERAS_BACKEND": cfg.backend,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "JAX_PLATFORMS": "cpu",
            "JAX_ENABLE_X64": "1" if cfg.x64 else "0",
            "CUDA_VISIBLE_DEVICES": "",
            "TF_CPP_MIN_LOG_LEVEL": "3",
            "PYTHONHASHSEED": "0",
        }
        # the caller's XLA flags (make test's optimisation level) with this configuration's devices
        flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f]
        if cfg.backend == "jax" and cfg.devices > 1:
            flags.append(f"--xla_force_host_platform_device_count={cfg.devices}")
        env.pop("XLA_FLAGS", None)
        if flags:
            env["XLA_FLAGS"] = " ".join(flags)
        return env

    def _launch(self, name: str) -> None:
        cfg = CONFIGS[name]
        spec = {"devices": cfg.devices, "tasks": list(cfg.tasks)}
        if cfg.ckpt:
            spec["ckpt_out"] = str(self.tmp / name)
        if cfg.resume_from:
            spec["resume_from"] = str(self.tmp / cfg.resume_from)
        log = tempfile.TemporaryFile(mode="w+")
        cmd = [sys.executable, str(HERE / "worker.py"), json.dumps(spec)]
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=self._env(cfg), stdout=log, stderr=subprocess.STDOUT, text=True
        )
        self.running[name] = (proc, log, time.monotonic())

    def _reap(self) -> None:
        for name, (proc, log, start) in list(self.running.items()):
            elapsed = time.monotonic() - start
            if proc.poll() is None and elapsed < HANG_GUARD_S:
                continue
            hung = proc.poll() is None
            if hung:
                proc.kill()
                proc.wait()
            log.seek(0)
            output = log.read()
            log.close()
            del self.running[name]
            if proc.returncode < 0 and not hung and name not in self.retried:
                # a signal from the framework's native runtime, not a failed check: TF's
                # MirroredStrategy process died of SIGSEGV once in about twenty make test runs
                # (no Python traceback). Run it again, once, and say so; a crash that repeats fails.
                self.retried[name] = (
                    f"rc={proc.returncode} after {elapsed:.1f} s; its output's end:\n{output[-2000:]}"
                )
                self._launch(name)
                continue
            result = {"rc": proc.returncode, "output": output, "wall_s": round(elapsed, 1)}
            if name in self.retried:
                result["retried"] = self.retried[name]
            line = [ln for ln in output.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode == 0 and line:
                result.update(json.loads(line[-1][len("RESULT ") :]))
            self.done[name] = result

    def _order(self, wanted: str) -> list[str]:
        first = [d for d in (CONFIGS[wanted].resume_from, wanted) if d]
        return first + [n for n in CONFIGS if n in self.planned and n not in first]

    def _fill(self, wanted: str) -> None:
        """Start the next configurations in order while slots are free; one that must run
        alone waits for an empty machine and blocks the ones after it."""
        for name in self._order(wanted):
            if name in self.running or name in self.done:
                continue
            cfg = CONFIGS[name]
            busy = len(self.running) >= PARALLEL or any(CONFIGS[n].alone for n in self.running)
            if busy or (cfg.alone and self.running) or (cfg.resume_from and cfg.resume_from not in self.done):
                return
            self._launch(name)

    def get(self, name: str) -> dict:
        while name not in self.done:
            self._reap()
            self._fill(name)
            time.sleep(0.1)
        return self.done[name]

    def close(self) -> None:
        for proc, log, _ in self.running.values():
            proc.kill()
            proc.wait()
            log.close()


def with_dependencies(names: set[str]) -> set[str]:
    out = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo += [d for d in (CONFIGS[name].baseline, CONFIGS[name].resume_from) if d]
    return out


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    """The configurations of the selected tests (and those they compare with) start in order,
    one after the other; under pytest-xdist each worker starts what its own tests need."""
    planned: set[str] = set()
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        planned = with_dependencies(
            {
                item.callspec.params["name"]
                for item in request.session.items
                if getattr(item, "originalname", None) == "test_keras_distributed"
            }
        )
    r = Runs(tmp_path_factory.mktemp("keras_distributed"), planned)
    yield r
    r.close()


def task_result(runs: Runs, name: str, task: str) -> dict:
    res = runs.get(name)
    if not res.get("reported"):
        res["reported"] = True
        print(f"{name}: {res['wall_s']} s in its process, tasks {res.get('seconds')}")
        if res.get("retried"):
            print(f"{name}: its first process ended by a signal and it ran again: {res['retried']}")
    where = f"configuration {name} ({CONFIGS[name]}), rc={res['rc']}, {res['wall_s']} s"
    assert res["rc"] == 0 and task in res, f"{where}: no result\n{res['output'][-12000:]}"
    assert "crashed" not in res[task], (
        f"{where}: task {task} crashed\n{res[task]['crashed']}\n{res['output'][-6000:]}"
    )
    return res[task]


def baseline_result(runs: Runs, name: str, task: str) -> dict | None:
    """The single-device run's result of ``task``, if it ran it (and this is not it)."""
    base = CONFIGS[name].baseline
    if base is None or task not in CONFIGS[base].tasks:
        return None
    return task_result(runs, base, task)


# -- comparisons -----------------------------------------------------------------------------


def rel_tol(name: str) -> float:
    cfg = CONFIGS[name]
    return REL_F32_STATE if cfg.backend == "jax" and not cfg.x64 else REL_F64_STATE


def pair_tol(name: str) -> float:
    """Against the single-device run: the looser of the two configurations' tolerances."""
    return max(rel_tol(name), rel_tol(CONFIGS[name].baseline or name))


def selected(only=None) -> list[cases.Metric]:
    return [m for m in cases.METRICS if only is None or only(m)]


def metric_logs(m: cases.Metric, logs: dict, prefix: str = "") -> dict:
    """The log entries of ``m`` (named ``prefix + m.name``), keyed without the prefix:
    ``{m.name: value}`` (and ``m.name + suffix`` per ``cases.QUANTITY_SUFFIXES`` with a
    confidence level), or ``{f"{m.name}.{key}": value}`` for a dict result."""
    name = prefix + m.name
    if name in logs:
        suffixes = ("", *cases.QUANTITY_SUFFIXES)  # with a confidence level: stderr, interval, count
        return {m.name + s: logs[name + s] for s in suffixes if name + s in logs}
    return {k[len(prefix) :]: v for k, v in logs.items() if k.startswith(name + ".")}


def assert_metrics(logs: dict, expected: dict, rel: float, what: str, prefix: str = "", only=None) -> None:
    """Every selected metric is in ``logs``; every ``expected`` entry matches."""
    checked = 0
    for m in selected(only):
        got = metric_logs(m, logs, prefix)
        assert got, f"{what}: {prefix}{m.name} not reported; logs: {sorted(logs)}"
        for key, value in got.items():
            if key in expected:
                # (M - E) / s-type values cancel: an O(1) z carries float32 rounding of M
                # divided by s (about 1e-2 here), so compare them on an absolute scale.
                derived = any(t in key for t in ("z_", "adjusted_"))
                tol = {"rel": rel * 10, "abs": 100 * rel} if derived else {"rel": rel, "abs": ABS}
                assert value == pytest.approx(expected[key], **tol), (
                    f"{what}: {prefix}{key} = {value!r}, expected {expected[key]!r}"
                )
                checked += 1
    assert checked, f"{what}: nothing compared"


def references(data: dict, only=None, **kw) -> dict:
    out = {}
    for m in selected(only):
        out.update(cases.reference(m, data, **kw))
    return out


def splits_for(name: str, n: int) -> list[tuple[int, int]] | None:
    """How the metric's batches were cut: global batches (one device, or JAX SPMD, where the
    metric sees the global batch) or per-replica batches (TF MirroredStrategy)."""
    cfg = CONFIGS[name]
    if cfg.backend == "tensorflow" and cfg.devices > 1:
        return cases.replica_splits(n, cases.BATCH, cfg.devices)
    return None


# With float32 state the GMR expectation keeps FLOAT32_GMR_ORDER cumulant sums, with float64
# state 20: the sums and the reported truncation bound differ (the values agree).
ORDER_DEPENDENT = ("gmr_cumulants", "gmr_tail", "geometric_mean_rank_error_bound")


def same_state_dtype(name: str) -> bool:
    """Whether ``name`` and its single-device baseline keep their state in one dtype."""
    cfg = CONFIGS[name]
    return cfg.baseline is None or rel_tol(name) == rel_tol(cfg.baseline)


def same_as_baseline(name: str, logs: dict, base: dict, what: str, prefix: str = "", only=None) -> None:
    """Every log entry of every selected metric equals the single-device run's (but for the
    GMR error bound where the two state dtypes differ)."""
    for m in selected(only):
        got, expected = metric_logs(m, logs, prefix), metric_logs(m, base, prefix)
        assert expected and sorted(got) == sorted(expected), (what, sorted(got), sorted(expected))
    skip = () if same_state_dtype(name) else ORDER_DEPENDENT
    assert_metrics(
        logs,
        {
            k: v
            for m in selected(only)
            for k, v in metric_logs(m, base, prefix).items()
            if not k.endswith(skip)
        },
        pair_tol(name),
        f"{what} vs single device",
        prefix,
        only,
    )


# -- the tests ---------------------------------------------------------------------------------

ASPECTS = [(name, task) for name, cfg in CONFIGS.items() for task in cfg.tasks]


@pytest.mark.parametrize(("name", "task"), ASPECTS, ids=[f"{n}-{t}" for n, t in ASPECTS])
def test_keras_distributed(runs, name, task):
    CHECKS[task](runs, name)


def check_evidence(name: str, ev: dict) -> None:
    """The configuration really ran distributed, with sum-aggregated state of the right dtype."""
    cfg = CONFIGS[name]
    assert ev["backend"] == cfg.backend and ev["devices"] == cfg.devices, ev
    assert ev["aggregations"] == ["sum"], ev
    assert ev["n_variables"] >= 4 * len(cases.METRICS), ev
    if cfg.backend == "jax":
        assert ev["x64"] == cfg.x64, ev
        assert ev["state_dtypes"] == (["float64"] if cfg.x64 else ["float32"]), ev
        assert ev["jax_devices"] == cfg.devices, ev
        # state replicated on every device of the mesh, batches split along it
        assert ev["variable_devices"] == [cfg.devices], ev
        if cfg.devices > 1:
            assert "'batch'" in ev["batch_sharding"], ev
    else:
        assert ev["state_dtypes"] == ["float64"], ev
        assert ev["replicas"] == cfg.devices, ev
        if cfg.devices > 1:  # one local copy per replica, summed when read
            assert ev["variable_types"] == ["SyncOnReadVariable"], ev


def check_evaluate(runs: Runs, name: str) -> None:
    """evaluate with the metrics compiled in: padding labels, a short last batch."""
    cfg = CONFIGS[name]
    got = task_result(runs, name, "evaluate")
    check_evidence(name, got["evidence"])
    rel = rel_tol(name)
    assert_metrics(got["plain"], references(cases.eval_data()), rel, f"{name} evaluate")
    r_ref = references(cases.eval_data(n_lists=cases.REMAINDER_LISTS))
    assert_metrics(got["remainder_padded"], r_ref, rel, f"{name} remainder padded with padding lists")
    if "remainder" in got:  # one device, and MirroredStrategy (replicas with 4, 4, 1 and 0 lists)
        assert_metrics(got["remainder"], r_ref, rel, f"{name} short last batch")
    for m in cases.METRICS:  # the statistics are logged (then compared key by key below)
        if m.name.startswith("ci_"):
            stats = {
                k: v for k, v in metric_logs(m, got["plain"]).items() if k.endswith(cases.QUANTITY_SUFFIXES)
            }
            assert len(stats) >= len(cases.QUANTITY_SUFFIXES), (m.name, sorted(got["plain"]))
            assert all(np.isfinite(v) for v in stats.values()), stats
            assert any(v > 0 for k, v in stats.items() if k.endswith("_stderr")), stats
    base = baseline_result(runs, name, "evaluate")
    if base is not None:
        same_as_baseline(name, got["plain"], base["plain"], f"{name} evaluate")
        same_as_baseline(name, got["remainder_padded"], base["remainder_padded"], f"{name} padded")
        check_same_sums(name, got["plain_state"], base["plain_state"])
    if cfg.backend == "tensorflow" and cfg.devices > 1:
        # each replica summed its own share; reading the variable adds them up
        local = got["local_weight_sum"]
        total = got["plain_state"][f"{cases.METRICS[0].name}/weight_sum"]
        assert len(local) == cfg.devices and all(v > 0 for v in local), local
        assert sum(local) == pytest.approx(total, rel=1e-12), (local, total)


def check_refusals(runs: Runs, name: str) -> None:
    """Batches the devices cannot split. JAX DataParallel refuses them (the supported way is
    to pad with all-padding lists, checked in check_evaluate); Keras' TF trainer refuses a
    first batch that is uneven over the replicas (its symbolic build averages that batch over
    them) and runs uneven later batches (checked exact in check_evaluate). Whenever Keras runs
    one of these, the number must be exact."""
    cfg = CONFIGS[name]
    got = task_result(runs, name, "refusals")
    rel = rel_tol(name)
    tried = {"odd_batch": cases.eval_data()}
    if cfg.backend == "jax":
        tried["short_batch"] = cases.eval_data(n_lists=cases.SHORT_LISTS)
    assert sorted(got) == sorted(tried), got
    for key, data in tried.items():
        res = got[key]
        if "ok" in res:
            assert_metrics(res["ok"], references(data), rel, f"{name} {key}")
            continue
        known = ("divisible", "divide") if cfg.backend == "jax" else ("same size and shape",)
        assert any(s in res["error"] for s in known), f"{name} {key}: unexpected error {res['error']}"


def check_same_sums(name: str, got: dict, base: dict) -> None:
    """The metric variables themselves (the fields, compensation applied) match one device."""

    def fields(state: dict) -> dict:
        return {
            path: np.asarray(v, np.float64) - np.asarray(state.get(path + "_compensation", 0.0), np.float64)
            for path, v in state.items()
            if not path.endswith("_compensation")
        }

    g, b = fields(got), fields(base)
    assert sorted(g) == sorted(b), (sorted(g), sorted(b))
    skip = () if same_state_dtype(name) else ORDER_DEPENDENT
    for path in g:
        if path.endswith(skip):
            continue
        assert np.allclose(g[path], b[path], rtol=pair_tol(name), atol=1e-6), (path, g[path], b[path])


GROUPS = {  # the inputs task's metric groups: name prefix -> reference keywords, which metrics
    "lw_": ({"weights": "list_w"}, None),
    "iw_": ({"weights": "item_w"}, lambda m: m.item_weights),
    "mk_": ({"mask": True}, None),
}


def check_inputs(runs: Runs, name: str) -> None:
    """Per-list weights, per-item weights and masks (metrics updated in compute_metrics).

    keras-rs gives a list without a relevant item the mean list weight of its batch, so with
    uneven weights the number depends on the batches the metric sees: the global batch on one
    device and under JAX DataParallel (one SPMD program), each replica's share of it under
    MirroredStrategy (update_state runs per replica). The expected values follow that."""
    cfg = CONFIGS[name]
    got = task_result(runs, name, "inputs")
    rel = rel_tol(name)
    full = cases.eval_data()
    padded = cases.pad_lists(cases.eval_data(n_lists=cases.REMAINDER_LISTS), cases.BATCH)
    for key, d in (("full", full), ("padded", padded)):
        splits = splits_for(name, len(d["labels"]))
        for prefix, (kw, only) in GROUPS.items():
            expected = references(d, only, splits=splits, **kw)
            assert_metrics(got[key], expected, rel, f"{name} {key} {kw}", prefix, only)
    base = baseline_result(runs, name, "inputs")
    if base is not None:
        for key in ("full", "padded"):
            for prefix, (_, only) in GROUPS.items():
                if cfg.backend == "tensorflow" and prefix == "iw_":
                    continue  # keras-rs list weights per replica batch: checked against the reference
                if cfg.backend == "tensorflow" and prefix == "lw_":

                    def only(m):  # the batch-free ones (keras-rs list metrics: see above)
                        return m.target == "index"

                same_as_baseline(name, got[key], base[key], f"{name} {key} {prefix}", prefix, only)


def check_kahan(runs: Runs, name: str) -> None:
    """float32 state with Kahan compensation under the configuration's engine.

    Weights of 2^-24 added to a total of 1 are lost in float32 (half an ulp) without
    compensation; the compensated total ``total - compensation`` keeps them. Under JAX
    DataParallel the state is one replicated value updated by the SPMD program (the batch sum
    is reduced over the devices, then added once, compensated): nothing per device to combine.
    Under MirroredStrategy each replica keeps its own (total, compensation) and a read sums each
    variable over the replicas: as each replica's value is ``total_r - compensation_r``,
    summing the two variables separately and subtracting gives the sum of the values (the map
    is linear). The read's R - 1 float32 additions of the totals add at most (R - 1) half-ulps
    of the result, once, not growing with the number of updates. A restore assigns 1/R of each
    sum to every replica (TF), which keeps ``sum_r (total_r - compensation_r)``; updates then
    continue compensated on each replica."""
    cfg = CONFIGS[name]
    got = task_result(runs, name, "kahan")
    k, unit = cases.KAHAN_BATCHES, cases.KAHAN_UNIT
    st, cont = got["state"], got["continued_state"]
    # Continuing to about 9 by adding 1s: Kahan's bound 2u sum|x| (u = 2^-24), plus on TF
    # replicas the read's R - 1 additions of shares of about 9/R (half an ulp of 9 each).
    slack = 2 * 2.0**-24 * 9 + (cfg.devices - 1) * 2.0**-21 * (cfg.backend == "tensorflow")
    for m in cases.METRICS:
        for weight, count in weight_and_count(st, f"k_{m.name}/"):
            total, comp = st[weight], st[weight + "_compensation"]
            # exact (float32 holds 1 + 7 * 2^-24 only as total - compensation; without it: 1.0)
            assert total - comp == 1.0 + (k - 1) * unit, (weight, "compensated weight total", total, comp)
            assert comp != 0, (weight, "the compensation was not exercised", total, comp)
            assert st[count] - st[count + "_compensation"] == k, (count, st)
            # continued from the restored sums over the same lists, each weighing 1 now
            total, comp = cont[weight], cont[weight + "_compensation"]
            expected = 1.0 + k + (k - 1) * unit
            assert abs((total - comp) - expected) <= slack, (weight, "continued", total, comp, expected)
            assert cont[count] - cont[count + "_compensation"] == 2 * k, (count, cont)
    assert got["restored_variables"] == len(st)
    expected = references(cases.kahan_data(), weights="list_w")
    assert_metrics(got["logs"], expected, REL_F32_STATE, f"{name} compensated float32", prefix="k_")
    if cfg.backend == "tensorflow" and cfg.devices > 1:
        local = got["local_weight_sum"]
        comp = got["local_weight_sum_compensation"]
        assert len(local) == len(comp) == cfg.devices, (local, comp)
        first = cases.METRICS[0].name
        assert sum(local) == st[f"k_{first}/weight_sum"], local
        assert sum(comp) == st[f"k_{first}/weight_sum_compensation"], comp
    base = baseline_result(runs, name, "kahan")
    if base is not None:
        same_as_baseline(name, got["logs"], base["logs"], f"{name} compensated float32", prefix="k_")


def weight_and_count(state: dict, prefix: str) -> list[tuple[str, str]]:
    """The weight total and list count variables of the metric whose variables start with
    ``prefix``: ``weight_sum``/``weight`` and ``count``, or each member's of a collection
    (``{member}__weight_sum``, ``{member}__count``)."""
    for weight in ("weight_sum", "weight"):
        if prefix + weight in state:
            return [(prefix + weight, prefix + "count")]
    members = [p for p in state if p.startswith(prefix) and p.endswith("__weight_sum")]
    assert members, (prefix, sorted(state))
    return [(p, p[: -len("weight_sum")] + "count") for p in members]


def all_logs(logs: dict, prefix: str = "") -> dict:
    """The entries of every registry metric, keyed without ``prefix``."""
    return {k: v for m in cases.METRICS for k, v in metric_logs(m, logs, prefix).items()}


def check_fit(runs: Runs, name: str) -> None:
    """fit + evaluate with the metrics compiled in; a checkpoint taken mid-evaluation.

    Keras does not write metric variables into a .keras file (``Metric`` has no
    ``save_own_variables``; compiled metrics are rebuilt after loading), so the checkpoint is
    the .keras model (weights and the compiled metrics' configs) plus the metric variables,
    assigned back once ``evaluate`` has reset them (a callback)."""
    cfg = CONFIGS[name]
    got = task_result(runs, name, "fit")
    hist = got["history"]
    assert all(len(v) == 2 for v in hist.values()), hist
    xv, yv = cases.fit_data(2, cases.VAL_LISTS)
    val = {"scores": cases.dense_ranker_scores(got["weights"], xv), "labels": yv}
    # Model outputs compared across computation paths (cases.MIN_GAP): no near tie in the
    # validation lists, nor in any list a metric saw in training, validation or evaluate.
    assert cases.min_gap(val["scores"]) > cases.MIN_GAP, cases.min_gap(val["scores"])
    assert hist["near_ties"] == hist["val_near_ties"] == [0.0, 0.0], hist
    for key in ("uninterrupted", "first_part", "resumed_here", "reloaded_here", "resumed_other"):
        if key in got:
            logs = got[key] if "logs" not in got[key] else got[key]["logs"]
            assert logs["near_ties"] == 0.0, (key, logs)
    expected = references(val)
    rel = rel_tol(name)
    last_val = {key[len("val_") :]: v[-1] for key, v in hist.items() if key.startswith("val_")}
    assert_metrics(last_val, expected, rel, f"{name} fit, validation after the last epoch")
    assert_metrics(got["uninterrupted"], expected, rel, f"{name} evaluate after fit")
    uninterrupted = all_logs(got["uninterrupted"])
    for key in ("resumed_here", "reloaded_here"):
        if key in got:
            res = got[key]
            assert res["restored_variables"] == got["n_state"], res
            assert res["n_metrics"] == len(cases.METRICS), res
            assert_metrics(res["logs"], uninterrupted, 1e-6, f"{name} {key}")
    if "reloaded_here" in got:
        assert got["reloaded_here"]["configs"] == got["resumed_here"]["configs"]
    base = baseline_result(runs, name, "fit")
    if base is not None:  # the training metrics, epoch by epoch
        assert base["history"]["near_ties"] == [0.0, 0.0], base["history"]
        for key, values in hist.items():
            if not key.endswith("loss"):
                expected = base["history"][key]
                assert values == pytest.approx(expected, rel=1e-5, abs=1e-6), (key, values, expected)
    if cfg.resume_from:
        other = task_result(runs, cfg.resume_from, "fit")
        other_scores = cases.dense_ranker_scores(other["weights"], xv)
        assert cases.min_gap(other_scores) > cases.MIN_GAP, cases.min_gap(other_scores)
        res = got["resumed_other"]
        assert res["restored_variables"] == other["n_state"], res
        assert res["configs"] == other["resumed_here"]["configs"]
        what = f"{name} continuing {cfg.resume_from}'s checkpoint"
        assert_metrics(res["logs"], all_logs(other["uninterrupted"]), rel, what)


CHECKS = {
    "evaluate": check_evaluate,
    "inputs": check_inputs,
    "kahan": check_kahan,
    "fit": check_fit,
    "refusals": check_refusals,
}


def test_example_keras_distributed(runs):
    """examples/keras_distributed.py prints the same numbers on 1 and 2 devices (it asserts
    so); run after the configurations (the fixture's workers are done by then)."""
    while runs.running:  # under PARALLEL > 1 or a partial selection, let the workers finish
        runs._reap()
        time.sleep(0.1)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    proc = guarded_run([sys.executable, str(ROOT / "examples" / "keras_distributed.py")], cwd=ROOT, env=env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith(("ndcg", "map"))]
    assert [r[0] for r in rows] == ["ndcg@5", "ndcg", "map@5"], output
    for name, one, two, _ in rows:
        assert float(one) == pytest.approx(float(two), rel=1e-6), (name, output)
