"""strata.distribute: tf.distribute's strategies over Strata's.

    strategy = strata.distribute.MirroredStrategy()
    with strategy.scope():
        model = strata.keras.Sequential([...])   # bound to `strategy`

OneDeviceStrategy and MirroredStrategy train in this process. The others
start a local cluster (a coordinator, PS tasks and workers as processes on
127.0.0.1) for each ``fit``, sized by the cluster resolver (TF_CONFIG's
"ps" and "worker" counts) or the constructor's defaults, and read the
trained weights back, so ``evaluate`` and ``predict`` afterwards run here.

A resolver whose cluster has a "chief" task names a running cluster
instead (as TF_CONFIG does on Kubernetes or for daemons started by hand):
Strata's coordinator runs at the chief's address, ``fit`` submits the job
there, waits for the resolver's PS tasks and workers to register, follows
the job and reads the weights back. Its workers read the job's data where
this process writes numpy arrays (a new directory under TMPDIR), so they
must see that directory; under MultiWorkerMirroredStrategy the first
worker must export its state (strata-worker --export-dir=DIR) to a
directory named here by STRATA_EXPORT_DIR.
"""
import contextlib
import enum
import json
import os
import threading

from . import _strata
from ._bindir import bin_dir

_local = threading.local()


def _stack():
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


class ReduceOp(enum.Enum):
    SUM = "SUM"
    MEAN = "MEAN"


class PerReplica:
    """One value per replica that ran in this process."""

    def __init__(self, values):
        self.values = tuple(values)

    def __repr__(self):
        return "PerReplica(%r)" % (self.values,)


class ReplicaContext:
    def __init__(self, strategy, replica_id):
        self.strategy = strategy
        self.replica_id_in_sync_group = replica_id
        self.num_replicas_in_sync = strategy.num_replicas_in_sync


class Strategy:
    """The base of the strategies: scope, run, reduce, and the native
    strategy fit trains under."""

    def __init__(self, native):
        self._native = native

    @property
    def num_replicas_in_sync(self):
        return self._native.num_replicas_in_sync

    @property
    def extended(self):
        return self

    @contextlib.contextmanager
    def scope(self):
        _stack().append(self)
        try:
            yield self
        finally:
            _stack().pop()

    def _local_replicas(self):
        return 1

    def run(self, fn, args=(), kwargs=None):
        """Calls fn(*args, **kwargs) once per replica of this process (with
        the replica's context current; a PerReplica among the arguments, at
        any depth of tuples, lists and dicts, gives each replica its own
        value) and returns a PerReplica of the results, or the single result
        with one replica."""
        kwargs = kwargs or {}
        n = self._local_replicas()
        results = []
        for r in range(n):
            _local.replica = ReplicaContext(self, r)
            try:
                results.append(fn(*_select(args, r, n), **_select(kwargs, r, n)))
            finally:
                _local.replica = None
        return results[0] if len(results) == 1 else PerReplica(results)

    def reduce(self, reduce_op, value, axis=None):
        import numpy as np
        if isinstance(reduce_op, str):
            try:
                reduce_op = ReduceOp[reduce_op.upper()]
            except KeyError:
                raise ValueError("reduce: reduce_op must be SUM or MEAN, got %r"
                                 % (reduce_op,)) from None
        values = value.values if isinstance(value, PerReplica) else (value,)
        arrays = [np.asarray(v) for v in values]
        if axis is not None:
            arrays = [a.sum(axis=axis) if reduce_op == ReduceOp.SUM
                      else a.mean(axis=axis) for a in arrays]
        total = sum(arrays[1:], arrays[0])
        if reduce_op == ReduceOp.MEAN:
            total = total / len(arrays)
        return total

    def experimental_distribute_dataset(self, dataset, options=None):
        """The batched `dataset` split between this process's replicas:
        iterating gives each global batch with every array replaced by a
        PerReplica of its rows for each replica (the array itself with one
        replica), for `run`; `fit` accepts it as the dataset."""
        return DistributedDataset(dataset, self)

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        """dataset_fn(InputContext) gives each replica's dataset, batched
        with the per-replica batch size; returned as a DistributedDataset
        of this process's input pipeline."""
        context = InputContext(num_input_pipelines=1, input_pipeline_id=0,
                               num_replicas_in_sync=self.num_replicas_in_sync)
        dataset = dataset_fn(context)
        from . import data as _data
        if not isinstance(dataset, _data.Dataset):
            raise TypeError("distribute_datasets_from_function: dataset_fn must "
                            "return a strata.data.Dataset, got %s"
                            % type(dataset).__name__)
        return DistributedDataset(dataset, self, per_replica_batches=True)

    def __repr__(self):
        return "<strata.distribute.%s: %d replicas in sync>" % (
            type(self).__name__, self.num_replicas_in_sync)


def _select(value, r, n):
    """`value` with each PerReplica in it replaced by replica r's value."""
    if isinstance(value, PerReplica):
        if len(value.values) != n:
            raise ValueError("run: a PerReplica argument holds %d values for %d "
                             "replicas" % (len(value.values), n))
        return value.values[r]
    if isinstance(value, tuple):
        return tuple(_select(v, r, n) for v in value)
    if isinstance(value, list):
        return [_select(v, r, n) for v in value]
    if isinstance(value, dict):
        return {k: _select(v, r, n) for k, v in value.items()}
    return value


def _replica_rows(rows, r, n):
    """Replica r's rows [begin, end) of a global batch of `rows` split as
    evenly as possible between n replicas (the first ones take one more)."""
    base, extra = divmod(rows, n)
    begin = r * base + min(r, extra)
    return begin, begin + base + (1 if r < extra else 0)


class InputContext:
    """tf.distribute.InputContext: what an input function is told."""

    def __init__(self, num_input_pipelines=1, input_pipeline_id=0,
                 num_replicas_in_sync=1):
        self.num_input_pipelines = num_input_pipelines
        self.input_pipeline_id = input_pipeline_id
        self.num_replicas_in_sync = num_replicas_in_sync

    def get_per_replica_batch_size(self, global_batch_size):
        if global_batch_size % self.num_replicas_in_sync:
            raise ValueError("The `global_batch_size` %r is not divisible by "
                             "`num_replicas_in_sync` %r" % (
                                 global_batch_size, self.num_replicas_in_sync))
        return global_batch_size // self.num_replicas_in_sync


class DistributedDataset:
    """A batched strata.data.Dataset split between a strategy's replicas
    in this process (tf.distribute.DistributedDataset).

    Each element is a global batch whose arrays are PerReplica values (the
    first replicas take one row more where the batch does not divide), or
    the batch itself with one replica. With per_replica_batches (from
    distribute_datasets_from_function) each replica gets a whole batch of
    the dataset, so a global batch is num_replicas of them."""

    def __init__(self, dataset, strategy, per_replica_batches=False):
        from . import data as _data
        if isinstance(dataset, DistributedDataset):
            raise TypeError("experimental_distribute_dataset: the dataset is "
                            "already distributed")
        if not isinstance(dataset, _data.Dataset):
            raise TypeError("experimental_distribute_dataset: `dataset` must be a "
                            "strata.data.Dataset, got %s" % type(dataset).__name__)
        if dataset.batch_size is None:
            raise ValueError("experimental_distribute_dataset: `dataset` must be "
                             "batched (its batch is the global batch the replicas "
                             "share); call .batch(global_batch_size) first")
        self._dataset = dataset
        self._strategy = strategy
        self._per_replica_batches = per_replica_batches
        self.num_replicas = strategy._local_replicas()

    @property
    def dataset(self):
        """The dataset before distribution (what fit trains on)."""
        return self._dataset

    def _global_dataset(self):
        """The dataset fit trains on: global batches."""
        if not self._per_replica_batches or self.num_replicas == 1:
            return self._dataset
        return self._dataset._with(_batch=self._dataset.batch_size * self.num_replicas)

    def __iter__(self):
        n = self.num_replicas
        if n == 1:
            yield from self._dataset
            return
        if self._per_replica_batches:
            group = []
            for batch in self._dataset:
                group.append(batch)
                if len(group) == n:
                    yield _per_replica(group)
                    group = []
            return
        for batch in self._dataset:
            yield _split(batch, n)

    def __repr__(self):
        return "<DistributedDataset over %d replicas: %r>" % (self.num_replicas,
                                                                self._dataset)


def _split(batch, n):
    if isinstance(batch, tuple):
        return tuple(_split(b, n) for b in batch)
    rows = len(batch)
    return PerReplica(batch[slice(*_replica_rows(rows, r, n))] for r in range(n))


def _per_replica(group):
    """Replicas' whole batches as one element of PerReplica leaves."""
    if isinstance(group[0], tuple):
        return tuple(_per_replica([g[i] for g in group]) for i in range(len(group[0])))
    return PerReplica(group)


def get_strategy():
    """The innermost scope's strategy on this thread, else the default
    (one device)."""
    stack = _stack()
    return stack[-1] if stack else _default()


def has_strategy():
    return bool(_stack())


def get_replica_context():
    return getattr(_local, "replica", None) or ReplicaContext(get_strategy(), 0)


_DEFAULT = None


def _default():
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = OneDeviceStrategy("/cpu:0")
    return _DEFAULT


def _is_cpu(device):
    d = device.lower().lstrip("/")
    return d in ("cpu", "cpu:0", "device:cpu:0", "job:localhost/device:cpu:0")


def _gpu_name(device):
    d = device.lower().lstrip("/").replace("device:", "")
    if d.startswith("gpu:"):
        return "cuda:" + d[4:]
    if d == "gpu":
        return "cuda:0"
    return None


class OneDeviceStrategy(Strategy):
    """Trains in this process on one device ("/cpu:0")."""

    def __init__(self, device):
        if not isinstance(device, str) or not _is_cpu(device):
            raise ValueError("OneDeviceStrategy: device must be '/cpu:0' (this "
                             "strategy trains on the CPU), got %r" % (device,))
        self.worker_devices = (device,)
        super().__init__(_strata.one_device_strategy())


class MirroredStrategy(Strategy):
    """Replicas in this process, their gradients all-reduced every step.

    devices=None: one replica per visible GPU, else one on the CPU (as
    tf.distribute). A list of GPU names ("/gpu:0", "GPU:1") puts a replica
    on each (NCCL between them); CPU names ("/cpu:0", ...) one replica on
    the CPU per name."""

    def __init__(self, devices=None, cross_device_ops=None):
        if devices is None:
            try:
                native = _strata.mirrored_on_all_gpus()
            except Exception:  # no GPU: the CPU, as TensorFlow
                native = _strata.mirrored_strategy(1)
            self._replicas = native.num_replicas_in_sync
        else:
            if isinstance(devices, str):
                devices = [devices]
            devices = list(devices)
            if not devices:
                raise ValueError("MirroredStrategy: devices must not be empty")
            gpus = [_gpu_name(d) for d in devices]
            if all(g is not None for g in gpus):
                native = _strata.mirrored_on_devices(gpus)
            elif all(g is None for g in gpus):
                for d in devices:
                    if not d.lower().lstrip("/").replace("device:", "").startswith("cpu"):
                        raise ValueError("MirroredStrategy: %r is not a CPU or GPU "
                                         "device name" % (d,))
                native = _strata.mirrored_strategy(len(devices))
            else:
                raise ValueError("MirroredStrategy: mix of CPU and GPU devices %r"
                                 % (devices,))
            self._replicas = len(devices)
        super().__init__(native)

    def _local_replicas(self):
        return self._replicas


def _env_int(name, default):
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError("%s: %r is not an integer" % (name, value)) from None


class _LocalCluster(Strategy):
    def __init__(self, native, num_ps, num_workers, coordinator=None):
        self.num_ps = num_ps
        self.num_workers = num_workers
        # host:port of a running cluster's coordinator, or None (a local
        # cluster per fit).
        self.coordinator = coordinator
        super().__init__(native)


def _sizes(cluster_resolver, ps_default, workers_default):
    if cluster_resolver is None:
        return ps_default, workers_default
    spec = cluster_resolver.cluster_spec()
    return (spec.num_tasks("ps") or ps_default,
            spec.num_tasks("worker") or workers_default)


def _coordinator(cluster_resolver):
    """The running cluster's coordinator (its chief task's address) the
    resolver names, or "" for a local cluster."""
    if cluster_resolver is None:
        return ""
    spec = cluster_resolver.cluster_spec()
    for job in ("chief", "master"):
        if spec.num_tasks(job):
            address = spec.task_address(job, 0)
            if not isinstance(address, str) or ":" not in address:
                raise ValueError("cluster_resolver: the %s task's address must be "
                                 "host:port, got %r" % (job, address))
            return address
    return ""


def _default_resolver(cluster_resolver):
    if cluster_resolver is None and os.environ.get("TF_CONFIG"):
        from .cluster_resolver import TFConfigClusterResolver
        return TFConfigClusterResolver()
    return cluster_resolver


class ParameterServerStrategy(_LocalCluster):
    """Variables sharded over PS tasks; workers push asynchronously. The
    resolver's "ps" and "worker" counts size the local cluster each fit
    starts (2 and 2 without a resolver or TF_CONFIG); with a "chief" task
    the resolver names a running cluster (see the module's docstring)."""

    def __init__(self, cluster_resolver=None, variable_partitioner=None):
        cluster_resolver = _default_resolver(cluster_resolver)
        self.cluster_resolver = cluster_resolver
        num_ps, num_workers = _sizes(cluster_resolver, 2, 2)
        coordinator = _coordinator(cluster_resolver)
        extra = {}
        if variable_partitioner is not None:
            if not isinstance(variable_partitioner, experimental.partitioners.Partitioner):
                raise TypeError("ParameterServerStrategy: `variable_partitioner` must be "
                                "a tf.distribute.experimental.partitioners object "
                                "(FixedShardsPartitioner, MinSizePartitioner, "
                                "MaxSizePartitioner), got %r" % (variable_partitioner,))
            extra["partitioner"] = variable_partitioner._spec()
        self.variable_partitioner = variable_partitioner
        super().__init__(_strata.parameter_server_strategy(
            num_ps, num_workers, "async", bin_dir(), coordinator=coordinator,
            strategy_json=json.dumps(extra) if extra else ""),
            num_ps, num_workers, coordinator or None)


class CentralStorageStrategy(_LocalCluster):
    """Every variable on one PS task; the workers' gradients of a step
    averaged there (STRATA_NUM_WORKERS workers, default 2)."""

    def __init__(self, compute_devices=None, parameter_device=None):
        num_workers = _env_int("STRATA_NUM_WORKERS", 2)
        super().__init__(_strata.central_storage_strategy(1, num_workers, bin_dir()),
                         1, num_workers)


class MultiWorkerMirroredStrategy(_LocalCluster):
    """A copy of the model on every worker, gradients all-reduced (a ring
    between the workers). TF_CONFIG's "worker" count, else
    STRATA_NUM_WORKERS (default 2), sizes the local cluster; with a "chief"
    task the resolver names a running cluster (see the module's
    docstring)."""

    def __init__(self, cluster_resolver=None, communication_options=None):
        cluster_resolver = _default_resolver(cluster_resolver)
        self.cluster_resolver = cluster_resolver
        _, num_workers = _sizes(cluster_resolver, 0,
                                _env_int("STRATA_NUM_WORKERS", 2))
        coordinator = _coordinator(cluster_resolver)
        extra = {}
        if communication_options is not None:
            if not isinstance(communication_options, experimental.CommunicationOptions):
                raise TypeError("MultiWorkerMirroredStrategy: `communication_options` "
                                "must be a tf.distribute.experimental."
                                "CommunicationOptions, got %r" % (communication_options,))
            extra = communication_options._spec()
        self.communication_options = communication_options
        super().__init__(_strata.multi_worker_mirrored_strategy(
            1, num_workers, "ring", bin_dir(), coordinator=coordinator,
            export_dir=os.environ.get("STRATA_EXPORT_DIR", "") if coordinator else "",
            strategy_json=json.dumps(extra) if extra else ""),
            0, num_workers, coordinator or None)


class _Partitioners:
    """tf.distribute.experimental.partitioners: how ParameterServerStrategy
    splits each variable along axis 0 over the PS tasks (the job's
    strategy.partitioner)."""

    class Partitioner:
        def _spec(self):
            raise NotImplementedError

    class FixedShardsPartitioner(Partitioner):
        def __init__(self, num_shards):
            if isinstance(num_shards, bool) or not isinstance(num_shards, int) or \
                    num_shards < 1:
                raise ValueError("FixedShardsPartitioner: `num_shards` must be a "
                                 "positive integer, got %r" % (num_shards,))
            self.num_shards = num_shards

        def _spec(self):
            return {"type": "fixed", "num_shards": self.num_shards}

    class MinSizePartitioner(Partitioner):
        def __init__(self, min_shard_bytes=256 << 10, max_shards=1, bytes_per_string=16):
            if min_shard_bytes < 1:
                raise ValueError("MinSizePartitioner: `min_shard_bytes` must be "
                                 "positive, got %r" % (min_shard_bytes,))
            if max_shards < 1:
                raise ValueError("MinSizePartitioner: `max_shards` must be positive, "
                                 "got %r" % (max_shards,))
            self.min_shard_bytes, self.max_shards = int(min_shard_bytes), int(max_shards)

        def _spec(self):
            return {"type": "min_size", "min_shard_bytes": self.min_shard_bytes,
                    "max_shards": self.max_shards}

    class MaxSizePartitioner(Partitioner):
        def __init__(self, max_shard_bytes, max_shards=None, bytes_per_string=16):
            if max_shard_bytes < 1:
                raise ValueError("MaxSizePartitioner: `max_shard_bytes` must be "
                                 "positive, got %r" % (max_shard_bytes,))
            if max_shards is not None and max_shards < 1:
                raise ValueError("MaxSizePartitioner: `max_shards` must be positive, "
                                 "got %r" % (max_shards,))
            self.max_shard_bytes = int(max_shard_bytes)
            self.max_shards = max_shards

        def _spec(self):
            return {"type": "max_size", "max_shard_bytes": self.max_shard_bytes,
                    "max_shards": int(self.max_shards or 0)}


class _CommunicationImplementation(enum.Enum):
    AUTO = "AUTO"
    RING = "RING"
    NCCL = "NCCL"


class _CommunicationOptions:
    """tf.distribute.experimental.CommunicationOptions for
    MultiWorkerMirroredStrategy's all-reduce: bytes_per_pack (the
    collective's pack size), timeout_seconds, implementation (AUTO and RING:
    the ring between the workers; NCCL: the ring too, over the GPUs' NCCL
    where the workers have them)."""

    def __init__(self, bytes_per_pack=0, timeout_seconds=None,
                 implementation=_CommunicationImplementation.AUTO):
        if bytes_per_pack < 0:
            raise ValueError("CommunicationOptions: `bytes_per_pack` must be "
                             "non-negative, got %r" % (bytes_per_pack,))
        if not isinstance(implementation, _CommunicationImplementation):
            raise ValueError("CommunicationOptions: `implementation` must be a "
                             "CommunicationImplementation, got %r" % (implementation,))
        self.bytes_per_pack = int(bytes_per_pack)
        self.timeout_seconds = timeout_seconds
        self.implementation = implementation

    def _spec(self):
        spec = {}
        if self.bytes_per_pack:
            spec["pack_bytes"] = self.bytes_per_pack
        if self.timeout_seconds is not None:
            spec["timeout_seconds"] = float(self.timeout_seconds)
        return spec


class _Experimental:
    """tf.distribute.experimental."""
    partitioners = _Partitioners
    CommunicationOptions = _CommunicationOptions
    CommunicationImplementation = _CommunicationImplementation
    CollectiveCommunication = _CommunicationImplementation


experimental = _Experimental()


from . import cluster_resolver  # noqa: E402  (tf.distribute.cluster_resolver)

experimental.ParameterServerStrategy = ParameterServerStrategy
experimental.CentralStorageStrategy = CentralStorageStrategy
experimental.MultiWorkerMirroredStrategy = MultiWorkerMirroredStrategy
