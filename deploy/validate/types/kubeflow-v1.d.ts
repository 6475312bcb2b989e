// The TFJob custom resource (kubeflow.org/v1) as the Kubeflow training
// operator defines it (pkg/apis/kubeflow.org/v1: tensorflow_types.go,
// common_types.go); status omitted (the controller writes it). Pod templates
// are the Kubernetes types, so everything below them is checked as strictly
// as a Deployment's.
import { ObjectMeta } from "kubernetes-types/meta/v1";
import { PodTemplateSpec } from "kubernetes-types/core/v1";
import { Quantity } from "kubernetes-types/api/resource";

export interface SchedulingPolicy {
  minAvailable?: number;
  queue?: string;
  minResources?: { [name: string]: Quantity };
  priorityClass?: string;
  scheduleTimeoutSeconds?: number;
}

export interface RunPolicy {
  cleanPodPolicy?: "All" | "Running" | "None";
  ttlSecondsAfterFinished?: number;
  activeDeadlineSeconds?: number;
  backoffLimit?: number;
  schedulingPolicy?: SchedulingPolicy;
  suspend?: boolean;
  managedBy?: string;
}

export interface ReplicaSpec {
  replicas?: number;
  template?: PodTemplateSpec;
  restartPolicy?: "Always" | "OnFailure" | "Never" | "ExitCode";
}

export interface TFJobSpec {
  runPolicy?: RunPolicy;
  successPolicy?: "" | "AllWorkers";
  tfReplicaSpecs: {
    Chief?: ReplicaSpec;
    Master?: ReplicaSpec;
    PS?: ReplicaSpec;
    Worker?: ReplicaSpec;
    Evaluator?: ReplicaSpec;
  };
  enableDynamicWorker?: boolean;
}

export interface TFJob {
  apiVersion: "kubeflow.org/v1";
  kind: "TFJob";
  metadata?: ObjectMeta;
  spec?: TFJobSpec;
}
