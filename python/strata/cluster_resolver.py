"""tf.distribute.cluster_resolver: the cluster a strategy is sized by."""
import json
import os


class ClusterSpec:
    def __init__(self, cluster):
        if isinstance(cluster, ClusterSpec):
            cluster = cluster.as_dict()
        if not isinstance(cluster, dict):
            raise TypeError("ClusterSpec: expected a dict of job name -> "
                            "list of addresses, got %s" % type(cluster).__name__)
        self._cluster = {}
        for job, tasks in cluster.items():
            if isinstance(tasks, dict):
                tasks = [tasks[k] for k in sorted(tasks)]
            if not isinstance(tasks, (list, tuple)):
                raise TypeError("ClusterSpec: job %r must list its tasks" % (job,))
            self._cluster[job] = list(tasks)

    def as_dict(self):
        return {job: list(tasks) for job, tasks in self._cluster.items()}

    @property
    def jobs(self):
        return list(self._cluster)

    def num_tasks(self, job_name):
        return len(self._cluster.get(job_name, []))

    def task_address(self, job_name, task_index):
        return self._cluster[job_name][task_index]

    def __bool__(self):
        return bool(self._cluster)


class ClusterResolver:
    task_type = None
    task_id = None
    rpc_layer = "grpc"

    def cluster_spec(self):
        raise NotImplementedError

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        return {}


class SimpleClusterResolver(ClusterResolver):
    def __init__(self, cluster_spec, master="", task_type=None, task_id=None,
                 environment="", num_accelerators=None, rpc_layer=None):
        self._spec = ClusterSpec(cluster_spec)
        self.task_type = task_type
        self.task_id = task_id
        if rpc_layer:
            self.rpc_layer = rpc_layer

    def cluster_spec(self):
        return self._spec


class TFConfigClusterResolver(ClusterResolver):
    """Reads the TF_CONFIG environment variable (as TensorFlow does):
    {"cluster": {"worker": [...], "ps": [...]}, "task": {"type": ..., "index": ...}}."""

    def __init__(self, task_type=None, task_id=None, rpc_layer=None, environment=None):
        raw = os.environ.get("TF_CONFIG", "")
        try:
            config = json.loads(raw) if raw else {}
        except json.JSONDecodeError as e:
            raise ValueError("TF_CONFIG is not valid JSON: %s" % e) from None
        if not isinstance(config, dict):
            raise ValueError("TF_CONFIG must be a JSON object")
        self._spec = ClusterSpec(config.get("cluster", {}))
        task = config.get("task", {})
        self.task_type = task_type if task_type is not None else task.get("type")
        self.task_id = task_id if task_id is not None else task.get("index")
        if rpc_layer:
            self.rpc_layer = rpc_layer
        self.environment = config.get("environment", environment or "")

    def cluster_spec(self):
        return self._spec
