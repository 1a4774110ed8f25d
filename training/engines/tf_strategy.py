"""Choosing the tf.distribute strategy and the mixed-precision policy.

The rest of training does not branch on the strategy: it builds everything inside
`strategy.scope()`, reads the input through `distribute_datasets_from_function`, and asks
the strategy itself which worker writes (`is_chief`) and what the workers agree on
(`spans_workers`, `worker_means`): `TfStrategy` answers for tf.distribute, as
`training.engines.jax_engine.JaxStrategy` does for JAX (`training.engines.backend.Strategy`).
"""

from __future__ import annotations

import json
import logging
import os

import keras
import tensorflow as tf

log = logging.getLogger(__name__)

# The memory assumed of a GPU, which TensorFlow does not report (a 16 GiB card).
GPU_BYTES = 16 * 2**30


class TfStrategy:
    """A tf.distribute strategy with the members training asks of any strategy.

    Everything else (`scope`, `run`, `extended`...) is the wrapped strategy's own.
    """

    def __init__(self, strategy: tf.distribute.Strategy):
        self.tf = strategy

    def __getattr__(self, name: str):
        if name == "tf":  # (not set yet: a copy being made)
            raise AttributeError(name)
        return getattr(self.tf, name)

    def is_chief(self) -> bool:
        """True on the worker that writes checkpoints, logs and the final model."""
        return is_chief(self.tf)

    def spans_workers(self) -> bool:
        """True for a MultiWorkerMirroredStrategy of more than one worker."""
        return spans_workers(self.tf)

    def worker_means(self, *values: float) -> tuple[float, ...]:
        """The means of `values` over the workers (one collective); see `worker_means`."""
        return worker_means(self.tf, *values)

    def describe_devices(self) -> dict:
        devices = [device.name for device in tf.config.list_logical_devices()]
        return {
            "devices": devices,
            "tensorflow": tf.__version__,
            "strategy": type(self.tf).__name__,
        }

    def accelerator_memory(self) -> int | None:
        """TensorFlow does not say how much a GPU holds: `GPU_BYTES` is assumed."""
        return GPU_BYTES if tf.config.list_logical_devices("GPU") else None


def make_strategy(name: str) -> TfStrategy:
    """`tf_strategy(name)`, answering training's questions (`TfStrategy`)."""
    return TfStrategy(tf_strategy(name))


def tf_strategy(name: str) -> tf.distribute.Strategy:
    """Returns the strategy called `name`.

    Args:
        name: "one_device" (TensorFlow's default strategy: no distribution wrapper, on
            the first GPU, else the CPU), "mirrored" (all local GPUs, or
            all logical CPUs), "multi_worker" (MultiWorkerMirroredStrategy from the
            TF_CONFIG environment variable), "tpu" (TPUStrategy on the TPU named by the
            TPU_NAME environment variable, or the local one), or "auto" (a TPU when
            TPU_NAME is set, mirrored over several GPUs, multi_worker when TF_CONFIG names
            several workers, else one device).

    Raises:
        ValueError: for an unknown name, or multi_worker without a usable TF_CONFIG.
    """
    if name == "auto":
        name = _auto_strategy_name()
        log.info("strategy auto -> %s", name)
    if name == "one_device":
        # Not OneDeviceStrategy: under it, `fit` with a distributed dataset measured a much
        # slower step than the same training without a wrapper, side by side, for nothing
        # one device needs (decision D15).
        return tf.distribute.get_strategy()
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker":
        _check_tf_config()
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=os.environ.get("TPU_NAME", "local")
        )
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(
        f"unknown strategy {name!r}; choose auto, one_device, mirrored, multi_worker or tpu"
    )


def spans_workers(strategy: tf.distribute.Strategy) -> bool:
    """True for a MultiWorkerMirroredStrategy whose cluster has more than one worker."""
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and (
        strategy.extended._in_multi_worker_mode()
    )


def worker_means(strategy: tf.distribute.Strategy, *values: float) -> tuple[float, ...]:
    """The means of `values` over the workers (the values themselves on one worker).

    For what every worker of a MultiWorkerMirrored run must agree on though their clocks
    differ (the time spent, a measured speed): one collective.
    """
    if not spans_workers(strategy):
        return values
    local = strategy.run(lambda: tf.constant(values, tf.float64))
    mean = strategy.reduce(tf.distribute.ReduceOp.MEAN, local, axis=None).numpy()
    return tuple(float(value) for value in mean)


def _auto_strategy_name() -> str:
    if os.environ.get("TPU_NAME"):
        return "tpu"
    if _tf_config_workers() > 1:
        return "multi_worker"
    if len(tf.config.list_logical_devices("GPU")) > 1:
        return "mirrored"
    return "one_device"


def _tf_config_workers() -> int:
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    except json.JSONDecodeError:
        return 0
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def _check_tf_config() -> None:
    text = os.environ.get("TF_CONFIG")
    if not text:
        raise ValueError("strategy multi_worker needs the TF_CONFIG environment variable")
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON: {error}") from error
    if "cluster" not in config or "task" not in config:
        raise ValueError("TF_CONFIG needs 'cluster' and 'task' entries")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True on the worker that writes checkpoints, logs and the final model."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return True
    if resolver.task_type == "chief":
        return True
    cluster = resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and "chief" not in cluster


def select_precision(name: str, strategy: tf.distribute.Strategy) -> str:
    """Resolves "auto" and sets Keras' global dtype policy; returns the policy name.

    auto: mixed_float16 on GPUs (with loss scaling, added by `compile`), mixed_bfloat16 on
    TPUs, and on CPUs only where they compute bfloat16 natively (AVX512-BF16 or AMX):
    elsewhere bfloat16 runs through slow conversion paths (measured much slower than
    float32 in training on an AVX2 CPU; decision D16), so float32.
    """
    if name == "auto":
        device = _first_device(strategy)
        if "GPU" in device:
            name = "mixed_float16"
        elif "TPU" in device or cpu_has_native_bfloat16():
            name = "mixed_bfloat16"
        else:
            name = "float32"
    keras.config.set_dtype_policy(name)
    return name


def cpu_has_native_bfloat16() -> bool:
    """True when /proc/cpuinfo lists AVX512-BF16 or AMX-BF16 (Linux; False elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def _first_device(strategy: tf.distribute.Strategy) -> str:
    """The (upper-cased) device the first replica runs on."""
    try:
        return strategy.extended.worker_devices[0].upper()
    except RuntimeError:  # the default strategy: TensorFlow's own placement
        return "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0"
