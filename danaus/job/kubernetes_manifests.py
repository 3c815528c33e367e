"""The Kubernetes objects of a `KubernetesJob`: its key, and per mesh a Service and StatefulSet.

Each pod runs ``danaus worker`` listening on its own pod IP (the downward
API's ``status.podIP``), never on every interface. The job's key is a Secret
mounted as a file that only its owner can read (mode 0400), named by
``DANAUS_JOB_KEY_FILE``; it never appears in a command line or in the pod's
spec. Pods are ready once their worker has written where it listens. The
headless Service gives each pod the stable DNS name the controller attaches
to, ``POD.SERVICE.NAMESPACE.svc``.
"""

from __future__ import annotations

import re
from typing import Any

from danaus.core.settings import variable

KEY_DIRECTORY = "/etc/danaus"
KEY_NAME = "job.key"
RUN_DIRECTORY = "/run/danaus"
ADDRESS_FILE = f"{RUN_DIRECTORY}/address"
_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")


def check_name(name: str) -> str:
    """``name`` if it can start the names of the job's objects (a short DNS label)."""
    if not isinstance(name, str) or not _LABEL.match(name):
        raise ValueError(
            f"a Kubernetes job's name is lowercase letters, digits and '-', starting with a "
            f"letter, at most 40 characters: not {name!r}"
        )
    return name


def service_name(job: str, mesh: str) -> str:
    """The Service and StatefulSet of mesh ``mesh`` (Python names become DNS labels)."""
    return f"{job}-{mesh.lower().replace('_', '-')}"


def secret_name(job: str) -> str:
    return f"{job}-key"


def labels(job: str, mesh: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "danaus", "danaus.dev/job": job,
            "danaus.dev/mesh": service_name(job, mesh)}


def secret(job: str, namespace: str, key: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret_name(job), "namespace": namespace},
        "type": "Opaque",
        "stringData": {KEY_NAME: key},
    }


def service(job: str, namespace: str, mesh: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service_name(job, mesh), "namespace": namespace,
                     "labels": labels(job, mesh)},
        "spec": {
            "clusterIP": "None",
            "selector": labels(job, mesh),
            "ports": [{"name": "danaus", "port": port, "targetPort": port}],
            "publishNotReadyAddresses": True,
        },
    }


def stateful_set(
    job: str, namespace: str, mesh: str, hosts: int, image: str, port: int
) -> dict[str, Any]:
    name = service_name(job, mesh)
    worker = {
        "name": "worker",
        "image": image,
        "command": ["danaus", "worker", "--listen", f"$(POD_IP):{port}", "--name",
                    "$(POD_NAME)", "--address-file", ADDRESS_FILE],
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": variable("job_key_file"), "value": f"{KEY_DIRECTORY}/{KEY_NAME}"},
        ],
        "ports": [{"name": "danaus", "containerPort": port}],
        "volumeMounts": [
            {"name": "job-key", "mountPath": KEY_DIRECTORY, "readOnly": True},
            {"name": "run", "mountPath": RUN_DIRECTORY},
        ],
        "readinessProbe": {"exec": {"command": ["test", "-s", ADDRESS_FILE]},
                           "periodSeconds": 1},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels(job, mesh)},
        "spec": {
            "serviceName": name,
            "replicas": hosts,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels(job, mesh)},
            "template": {
                "metadata": {"labels": labels(job, mesh)},
                "spec": {
                    "containers": [worker],
                    "volumes": [
                        {"name": "job-key", "secret": {
                            "secretName": secret_name(job), "defaultMode": 0o400,
                            "items": [{"key": KEY_NAME, "path": KEY_NAME}]}},
                        {"name": "run", "emptyDir": {}},
                    ],
                },
            },
        },
    }


def render(
    job: str, namespace: str, meshes: dict[str, int], image: str, port: int, key: str
) -> list[dict[str, Any]]:
    """Every object of the job, in the order to create them (the Secret first)."""
    objects = [secret(job, namespace, key)]
    for mesh, hosts in meshes.items():
        objects.append(service(job, namespace, mesh, port))
        objects.append(stateful_set(job, namespace, mesh, hosts, image, port))
    return objects
