"""Checkpoints: periodic saves, resume, and weight averaging.

Saves go through `tf.train.CheckpointManager`: the data files are written first and the
`checkpoint` index file is replaced atomically afterwards, so a process killed at any
moment (SIGKILL included) leaves the last complete checkpoint as the latest one; a
partial write is never referenced and is overwritten by the next save of that step.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from translator.errors import TranslatorError

log = logging.getLogger(__name__)


class Checkpoints:
    """The model and optimizer state of a run, saved under `directory`.

    Under MultiWorkerMirroredStrategy every worker must take part in a save; the chief
    writes to `directory` and the others to a scratch directory they delete afterwards
    (TensorFlow's documented pattern).

    Args:
        directory: The run's checkpoint directory.
        model: The `Transformer`.
        optimizer: The Keras optimizer (its iteration counter is the step counter).
        keep_last: How many recent checkpoints to keep.
        strategy: The training strategy.
        **state: Other variables to keep, e.g. the time budget spent so far.
    """

    def __init__(self, directory: str | Path, model, optimizer, keep_last: int, strategy, **state):
        import tensorflow as tf

        self.directory = Path(directory)
        self.optimizer = optimizer
        self.checkpoint = tf.train.Checkpoint(
            model=model, optimizer=optimizer, random_states=random_states(model), **state
        )
        self.chief = strategy.is_chief()
        resolver = getattr(strategy, "cluster_resolver", None)
        task = f"{getattr(resolver, 'task_type', 'worker')}-{getattr(resolver, 'task_id', 0)}"
        self.write_directory = self.directory if self.chief else self.directory / f".scratch-{task}"
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, str(self.write_directory), max_to_keep=max(keep_last, 1)
        )

    @property
    def step(self) -> int:
        """Optimizer updates so far."""
        return int(self.optimizer.iterations.numpy())

    def latest(self) -> str | None:
        """Path prefix of the newest complete checkpoint, or None."""
        import tensorflow as tf

        return tf.train.latest_checkpoint(str(self.directory))

    def latest_written(self) -> str | None:
        """The newest checkpoint this process wrote (or found at start): a worker's own."""
        return self.manager.latest_checkpoint

    def restore_latest(self) -> int:
        """Restores the newest checkpoint that reads; returns the step it was saved at.

        A checkpoint whose files are damaged (a truncated or garbage data file, a missing
        index; e.g. a disk that filled up) is skipped with one warning naming it, and the
        next older one is tried; 0 without any checkpoint.

        Raises:
            CheckpointError: there are checkpoints, and none reads.
        """

        def attempt(path: str) -> str | None:
            why = unreadable(path)
            if why is None:
                self.checkpoint.restore(path).assert_existing_objects_matched()
            return why

        path = restore_newest(self.directory, self.candidates(), attempt)
        return _resumed(path, self.step)  # (the step once restored)

    def candidates(self) -> list[str]:
        """Path prefixes of the checkpoints on disk, newest first.

        Those the `checkpoint` state file lists, and any `ckpt-N.index` beside them (the
        state file may be the damaged one).
        """
        numbered = {str(p.with_suffix("")) for p in self.directory.glob("ckpt-*.index")}
        paths = {os.path.abspath(path) for path in [*self.all(), *numbered]}
        return sorted(paths, key=checkpoint_number, reverse=True)

    def save(self) -> str:
        """Saves the current state, numbered by step; returns its path prefix."""
        path = self.manager.save(checkpoint_number=self.step)
        if not self.chief:
            shutil.rmtree(self.write_directory, ignore_errors=True)
        return path

    def all(self) -> list[str]:
        """Path prefixes of the kept checkpoints, oldest first."""
        return kept_checkpoints(self.directory)


class ArrayCheckpoints:
    """`Checkpoints`' API over one NumPy file a checkpoint: what a JAX run keeps.

    `ckpt-N.npz` holds the model's weights, its dropout seed states, the optimizer's
    variables and the `state` ones, by position (their paths beside them, for a reader:
    a model's name may differ between processes), every count and shape checked on
    restore. A save writes a temporary file and renames it, so a process
    killed at any moment leaves complete checkpoints only; one that does not read is
    skipped for the next older one, as with `Checkpoints`. The values are plain arrays,
    so any backend reads them (`average_checkpoints`).

    Args: as `Checkpoints` (`strategy` is a `training.engines.jax_engine.JaxStrategy`: one
        process writes).
    """

    def __init__(self, directory: str | Path, model, optimizer, keep_last: int, strategy, **state):
        self.directory = Path(directory)
        self.optimizer = optimizer
        self.keep_last = max(keep_last, 1)
        weights = {id(w) for w in model.weights}
        self.groups = {
            "weights": list(model.weights),
            "random": [v for v in model.variables if id(v) not in weights],
            "optimizer": list(optimizer.variables),
            "state": [variable for _, variable in sorted(_flat(state))],
        }

    @property
    def step(self) -> int:
        """Optimizer updates so far."""
        return int(np.asarray(self.optimizer.iterations))

    def latest(self) -> str | None:
        """Path of the newest checkpoint, or None."""
        paths = self.all()
        return paths[-1] if paths else None

    def all(self) -> list[str]:
        """Paths of the kept checkpoints, oldest first."""
        return kept_checkpoints(self.directory)

    def latest_written(self) -> str | None:
        """As `latest` (one process writes)."""
        return self.latest()

    def candidates(self) -> list[str]:
        """Paths of the checkpoints on disk, newest first."""
        return self.all()[::-1]

    def save(self) -> str:
        """Saves the current state as `ckpt-STEP.npz`; keeps the newest `keep_last`."""
        self.directory.mkdir(parents=True, exist_ok=True)
        arrays = {}
        for group, variables in self.groups.items():
            for index, variable in enumerate(variables):
                arrays[f"{group}/{index}"] = np.asarray(variable)
            arrays[f"{group}/paths"] = np.array([_path(v) for v in variables] or [""])
        path = self.directory / f"ckpt-{self.step}.npz"
        partial = path.with_name(path.name + ".partial")
        with open(partial, "wb") as file:
            np.savez(file, **arrays)
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, path)
        for old in self.all()[: -self.keep_last]:
            Path(old).unlink(missing_ok=True)
        return str(path)

    def restore_latest(self) -> int:
        """Restores the newest checkpoint that reads; returns its step (0 without any).

        Raises:
            CheckpointError: there are checkpoints, and none reads.
        """

        def attempt(path: str) -> str | None:
            try:
                values = self._read(path)
            except (OSError, ValueError, KeyError, EOFError) as error:
                return f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:200]}"
            for variable, value in values:
                variable.assign(value)
            return None

        path = restore_newest(self.directory, self.candidates(), attempt)
        return _resumed(path, self.step)  # (the step once restored)

    def _read(self, path: str) -> list[tuple]:
        """Every `(variable, value)` of a checkpoint, all read before any is assigned."""
        pairs = []
        with np.load(path) as arrays:
            for group, variables in self.groups.items():
                pairs += _matched(arrays, group, variables, path)
        return pairs


class HostScalar:
    """A float64 number a JAX run's checkpoint keeps (`Budget`'s time and tokens).

    It lives on the host, so reading it waits on no device; `ArrayCheckpoints` saves and
    restores it like a variable. (TensorFlow's checkpoints keep a `tf.Variable` instead:
    `training.engines.backend.Engine.scalar`.)
    """

    def __init__(self, value: float = 0.0, name: str = "scalar"):
        self.name = name
        self.value = np.array(value, np.float64)  # 0-d

    @property
    def shape(self) -> tuple:
        return ()

    def __array__(self, dtype=None, copy=None):
        return np.array(self.value, dtype or np.float64)

    def numpy(self) -> np.ndarray:
        return self.value

    def assign(self, value) -> None:
        self.value = np.array(float(value), np.float64)

    def assign_add(self, value) -> None:
        self.assign(self.value + float(value))


def tf_scalar(value: float = 0.0, name: str = "scalar"):
    """`HostScalar`'s counterpart, which TensorFlow's `Checkpoints` keep: a tf.Variable."""
    import tensorflow as tf

    return tf.Variable(value, trainable=False, dtype=tf.float64, name=name)


def _flat(state: dict, prefix: str = "") -> list[tuple[str, object]]:
    """`(name, variable)` of a nest of dicts of variables (`budget=Budget.state()`)."""
    pairs = []
    for name, value in state.items():
        if isinstance(value, dict):
            pairs += _flat(value, f"{prefix}{name}/")
        else:
            pairs.append((f"{prefix}{name}", value))
    return pairs


def _path(variable) -> str:
    return getattr(variable, "path", None) or variable.name


def _matched(arrays, group: str, variables: list, path: str) -> list[tuple]:
    """The `(variable, value)` pairs of one group of a checkpoint, shapes checked."""
    pairs = []
    for index, variable in enumerate(variables):
        value = arrays[f"{group}/{index}"]
        if tuple(value.shape) != tuple(variable.shape):
            raise ValueError(
                f"{group} variable {_path(variable)} has shape {tuple(variable.shape)}, "
                f"{tuple(value.shape)} in {path}"
            )
        pairs.append((variable, value))
    if f"{group}/{len(variables)}" in arrays:
        raise ValueError(f"{path} holds more {group} variables than this run has")
    return pairs


def restore_newest(
    directory: Path, candidates: list[str], attempt: Callable[[str], str | None]
) -> str | None:
    """Restores the first of `candidates` (newest first) that reads; returns it, or None.

    `attempt(path)` restores a checkpoint, or returns why it does not read before
    assigning anything: that one is skipped with one warning naming it.

    Raises:
        CheckpointError: there are candidates, and none reads.
    """
    bad = []
    for path in candidates:
        why = attempt(path)
        if why is None:
            return path
        log.warning("checkpoint %s does not read (%s); trying an older one", path, why)
        bad.append(f"{Path(path).name}: {why}")
    if bad:
        raise CheckpointError(
            f"{directory}: no checkpoint reads ({'; '.join(bad)}); move the directory away "
            "to train from the start"
        )
    return None


def _resumed(path: str | None, step: int) -> int:
    """The step a restore resumes at (0 when nothing was restored), logged."""
    if path is None:
        return 0
    log.info("resumed from %s at step %d", path, step)
    return step


class CheckpointError(TranslatorError, RuntimeError):
    """No checkpoint of a run reads; the message names each and why."""


def unreadable(path: str) -> str | None:
    """Why the checkpoint at `path` does not read, or None if every tensor does.

    Reading every tensor first means a damaged checkpoint is found before any variable
    is assigned from it.
    """
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(path)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, ValueError, IndexError, OSError, RuntimeError) as error:
        first = (str(error).strip().splitlines() or [""])[0]
        return f"{type(error).__name__}: {first[:200]}"
    return None


def checkpoint_number(path: str) -> int:
    """N of a `.../ckpt-N` path prefix or `.../ckpt-N.npz` file (-1 if it has none)."""
    number = Path(path).name.removesuffix(".npz").rpartition("-")[2]
    return int(number) if number.isdigit() else -1


def random_states(model) -> list:
    """The model's variables that are not weights: the dropout seed generators' states.

    `tf.train.Checkpoint(model=...)` saves weights only; without these a resumed run would
    draw other dropout masks than an uninterrupted one.
    """
    weights = {id(w) for w in model.weights}
    return [v.value for v in model.variables if id(v) not in weights]


def kept_checkpoints(directory: str | Path) -> list[str]:
    """The checkpoints a run directory's `checkpoints/` keeps, oldest first, either kind.

    TensorFlow's (path prefixes from its `checkpoint` state file) or a JAX run's
    (`ckpt-N.npz` files); [] without any.
    """
    arrays = sorted(map(str, Path(directory).glob("ckpt-*.npz")), key=checkpoint_number)
    if arrays:
        return arrays
    if not (Path(directory) / "checkpoint").is_file():
        return []  # (TensorFlow's state file: none, so no TensorFlow needed to say so)
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(str(directory))
    return list(state.all_model_checkpoint_paths) if state else []


def average_checkpoints(model, paths: list[str]) -> None:
    """Sets `model`'s weights to the mean of its weights in the given checkpoints.

    As in the paper (section 6.1), averaging the last checkpoints smooths the noise of the
    final updates. Only the model is read; optimizer slots are ignored.

    Args:
        model: A built `Transformer` of the same configuration as the checkpoints.
        paths: Checkpoint path prefixes (from `Checkpoints.all()`).

    Raises:
        ValueError: when `paths` is empty.
    """
    if not paths:
        raise ValueError("no checkpoints to average")
    total = None
    for path in paths:
        if path.endswith(".npz"):  # an `ArrayCheckpoints` file
            with np.load(path) as arrays:
                values = [value for _, value in _matched(arrays, "weights", model.weights, path)]
        else:
            import tensorflow as tf

            reader = tf.train.Checkpoint(model=model)
            reader.read(path).expect_partial().assert_existing_objects_matched()
            values = model.get_weights()
        weights = [np.asarray(w, dtype=np.float64) for w in values]
        total = weights if total is None else [t + w for t, w in zip(total, weights, strict=True)]
    model.set_weights([t / len(paths) for t in total])
