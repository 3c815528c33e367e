"""`KubernetesJob`: hosts that are pods, one worker in each, found by their DNS names.

`KubernetesJob.apply` creates (or updates) the job's objects
(`danaus.job.kubernetes_manifests`) through the Kubernetes API and waits until
every pod's worker listens. `KubernetesJob.state` attaches to the pods by
their stable names, ``POD.SERVICE.NAMESPACE.svc``, so the controller runs
inside the cluster (a pod of its own) or anywhere those names resolve and the
pods are reachable. `KubernetesJob.kill` deletes the objects and waits until
the pods are gone.

The API is reached through a small interface, `KubernetesApi`; by default
`ClientApi`, on the ``kubernetes`` package with the usual configuration
(``~/.kube/config``, or the pod's service account).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any, Protocol

from danaus.job import kubernetes_manifests as manifests
from danaus.job.base import Job, SchedulerMissing
from danaus.job.waiting import poll

START_TIMEOUT = 600.0
"""Seconds to wait for every pod to be ready (images may have to be pulled)."""
POLL = 1.0
"""Seconds between asks of the Kubernetes API about the job's StatefulSets."""


class KubernetesApi(Protocol):
    """What a `KubernetesJob` needs of the Kubernetes API."""

    def apply(self, manifest: dict[str, Any]) -> None:
        """Create the object, or update it if it exists."""

    def delete(self, manifest: dict[str, Any]) -> None:
        """Delete the object (and what it owns), if it exists."""

    def ready_replicas(self, namespace: str, name: str) -> int | None:
        """How many pods of a StatefulSet are ready; None once it does not exist."""


class KubernetesJob(Job):
    """Meshes of pods: ``KubernetesJob({"trainers": 4}, image="registry/app:1")``.

    ``image`` holds Danaus and the program's code (with ``danaus`` on its
    PATH, running as root, which owns the mounted key file); ``port`` is where
    each worker listens on its pod's IP; ``name`` starts the names of the
    job's objects (``NAME-key``, ``NAME-trainers``...). ``api`` is how the job
    talks to Kubernetes (`ClientApi` by default).
    """

    kind = "kubernetes"

    def __init__(
        self,
        meshes: Mapping[str, int],
        *,
        image: str,
        namespace: str = "default",
        name: str = "danaus",
        port: int = 26600,
        start_timeout: float = START_TIMEOUT,
        api: KubernetesApi | None = None,
        directory: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(meshes, directory=directory)
        self.name = manifests.check_name(name)
        services = {manifests.service_name(name, mesh) for mesh in self.meshes}
        if len(services) != len(self.meshes):
            raise ValueError(f"mesh names {list(self.meshes)} map to the same Kubernetes names")
        if not 0 < port < 65536:
            raise ValueError(f"port must be 1..65535, not {port!r}")
        if not image:
            raise ValueError("a Kubernetes job needs the image its pods run")
        self.image = image
        self.namespace = namespace
        self.port = port
        self.start_timeout = start_timeout
        self._api = api

    @property
    def api(self) -> KubernetesApi:
        if self._api is None:
            self._api = ClientApi()
        return self._api

    def config(self) -> dict[str, Any]:
        return {"meshes": self.meshes, "image": self.image, "namespace": self.namespace,
                "name": self.name, "port": self.port, "start_timeout": self.start_timeout}

    def manifests(self) -> list[dict[str, Any]]:
        """The job's objects, with its key in the Secret (`apply` makes the key)."""
        key = self.key_file.read_text().strip()
        return manifests.render(self.name, self.namespace, self.meshes, self.image,
                                self.port, key)

    def start(self) -> dict[str, Any]:
        for manifest in self.manifests():
            self.api.apply(manifest)
        deadline = time.monotonic() + self.start_timeout
        for mesh, hosts in self.meshes.items():
            name = manifests.service_name(self.name, mesh)

            def ready(name: str = name, hosts: int = hosts) -> bool:
                return (self.api.ready_replicas(self.namespace, name) or 0) >= hosts

            if not poll(ready, every=POLL, timeout=max(deadline - time.monotonic(), 0)):
                raise TimeoutError(
                    f"the pods of StatefulSet {self.namespace}/{name} were not ready "
                    f"within {self.start_timeout:g} s (kubectl describe statefulset {name})"
                )
        return {"applied": True}

    def addresses(self) -> dict[str, list[str]]:
        found = {}
        for mesh, hosts in self.meshes.items():
            service = manifests.service_name(self.name, mesh)
            found[mesh] = [f"{service}-{i}.{service}.{self.namespace}.svc:{self.port}"
                           for i in range(hosts)]
        return found

    def stop(self) -> None:
        objects = self.manifests() if self.key_file.exists() else manifests.render(
            self.name, self.namespace, self.meshes, self.image, self.port, "")
        for manifest in reversed(objects):
            self.api.delete(manifest)
        deadline = time.monotonic() + self.start_timeout
        for mesh in self.meshes:
            name = manifests.service_name(self.name, mesh)

            def gone(name: str = name) -> bool:
                return self.api.ready_replicas(self.namespace, name) is None

            if not poll(gone, every=POLL, timeout=max(deadline - time.monotonic(), 0)):
                raise TimeoutError(f"StatefulSet {self.namespace}/{name} was not deleted")

    def is_running(self) -> bool:
        return all(
            self.api.ready_replicas(self.namespace, manifests.service_name(self.name, mesh))
            == hosts
            for mesh, hosts in self.meshes.items()
        )


class ClientApi:
    """`KubernetesApi` on the ``kubernetes`` package (``pip install kubernetes``)."""

    def __init__(self, api_client: Any = None) -> None:
        try:
            from kubernetes import client, config
        except ImportError:
            raise SchedulerMissing(
                "a Kubernetes job needs the kubernetes package: pip install kubernetes"
            ) from None
        if api_client is None:
            config.load_config()
            api_client = client.ApiClient()
        self._core = client.CoreV1Api(api_client)
        self._apps = client.AppsV1Api(api_client)

    def _call(self, verb: str, manifest: dict[str, Any]) -> Any:
        api, kind = {
            "Secret": (self._core, "secret"),
            "Service": (self._core, "service"),
            "StatefulSet": (self._apps, "stateful_set"),
        }[manifest["kind"]]
        return getattr(api, f"{verb}_namespaced_{kind}")

    def apply(self, manifest: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        try:
            self._call("create", manifest)(namespace, manifest)
        except ApiException as exc:
            if exc.status != 409:
                raise
            self._call("patch", manifest)(name, namespace, manifest)

    def delete(self, manifest: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        try:
            self._call("delete", manifest)(name, namespace, propagation_policy="Foreground")
        except ApiException as exc:
            if exc.status != 404:
                raise

    def ready_replicas(self, namespace: str, name: str) -> int | None:
        from kubernetes.client.exceptions import ApiException

        try:
            found = self._apps.read_namespaced_stateful_set(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return found.status.ready_replicas or 0 if found.status else 0
