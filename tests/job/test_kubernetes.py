"""KubernetesJob without a cluster: its manifests, checked against the Kubernetes API schema,
its calls to the API (recorded), and the attach path, with each pod played by a local process
running the pod's rendered command and environment."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

import danaus
from danaus import Actor, endpoint
from danaus.job import KubernetesJob
from tests.multihost.conftest import ROOT
from tests.tcp.conftest import wait_until

KUBERNETES_VERSION = "1.37"


class Pod(Actor):
    @endpoint
    def pod_name(self) -> str:
        return os.environ["POD_NAME"]


class RecordingApi:
    """The Kubernetes API, recorded; a StatefulSet's pods are ready as soon as ``ready`` says."""

    def __init__(self, ready=None) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.ready = ready or (lambda manifest: manifest["spec"]["replicas"])

    def apply(self, manifest: dict[str, Any]) -> None:
        self.calls.append(("apply", manifest["kind"], manifest["metadata"]["name"]))
        self.objects[manifest["kind"], manifest["metadata"]["name"]] = manifest

    def delete(self, manifest: dict[str, Any]) -> None:
        self.calls.append(("delete", manifest["kind"], manifest["metadata"]["name"]))
        self.objects.pop((manifest["kind"], manifest["metadata"]["name"]), None)

    def ready_replicas(self, namespace: str, name: str) -> int | None:
        found = self.objects.get(("StatefulSet", name))
        return None if found is None else self.ready(found)


def job(tmp_path: Path, api: RecordingApi, **options: Any) -> KubernetesJob:
    return KubernetesJob({"trainers": 2, "generators": 1}, image="example.org/app:1",
                         namespace="ml", api=api, directory=tmp_path / "job", **options)


def test_manifests_are_valid_kubernetes_objects(tmp_path):
    applied = job(tmp_path, RecordingApi())
    applied.apply()
    objects = applied.manifests()
    assert [o["kind"] for o in objects] == [
        "Secret", "Service", "StatefulSet", "Service", "StatefulSet"]
    for manifest in objects:
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def test_workers_bind_the_pod_ip_and_read_the_key_from_a_private_file(tmp_path):
    applied = job(tmp_path, RecordingApi())
    applied.apply()
    secret, service, stateful_set = applied.manifests()[:3]
    key = applied.key_file.read_text().strip()
    assert secret["stringData"] == {"job.key": key}
    assert service["spec"]["clusterIP"] == "None"
    pod = stateful_set["spec"]["template"]["spec"]
    worker = pod["containers"][0]
    command = worker["command"]
    assert command[command.index("--listen") + 1] == "$(POD_IP):26600"
    env = {e["name"]: e for e in worker["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["DANAUS_JOB_KEY_FILE"]["value"] == "/etc/danaus/job.key"
    assert key not in repr(stateful_set)
    volume = {v["name"]: v for v in pod["volumes"]}["job-key"]["secret"]
    assert volume["secretName"] == secret["metadata"]["name"]
    assert volume["defaultMode"] == 0o400
    assert stateful_set["spec"]["serviceName"] == service["metadata"]["name"]


def test_apply_is_idempotent_and_kill_deletes_everything(tmp_path):
    api = RecordingApi()
    applied = job(tmp_path, api)
    applied.apply()
    applied.apply()
    assert api.calls == [
        ("apply", "Secret", "danaus-key"),
        ("apply", "Service", "danaus-trainers"),
        ("apply", "StatefulSet", "danaus-trainers"),
        ("apply", "Service", "danaus-generators"),
        ("apply", "StatefulSet", "danaus-generators"),
    ]
    assert applied.addresses() == {
        "trainers": ["danaus-trainers-0.danaus-trainers.ml.svc:26600",
                     "danaus-trainers-1.danaus-trainers.ml.svc:26600"],
        "generators": ["danaus-generators-0.danaus-generators.ml.svc:26600"],
    }
    applied.kill()
    assert api.objects == {}
    assert [c[0] for c in api.calls[5:]] == ["delete"] * 5
    assert not applied.key_file.exists()


def test_pods_that_never_get_ready_time_out(tmp_path):
    applied = job(tmp_path, RecordingApi(ready=lambda manifest: 0), start_timeout=0.5)
    with pytest.raises(TimeoutError, match="StatefulSet ml/danaus-trainers"):
        applied.apply()


def test_bad_input_is_refused(tmp_path):
    with pytest.raises(ValueError, match="lowercase"):
        KubernetesJob({"t": 1}, image="i", name="Bad_Name")
    with pytest.raises(ValueError, match="same Kubernetes names"):
        KubernetesJob({"a_b": 1, "A_b": 1}, image="i")
    with pytest.raises(ValueError, match="needs the image"):
        KubernetesJob({"t": 1}, image="")


class LocalPods:
    """A kubelet of sorts: runs each pod of a StatefulSet as a local process, with the pod's
    own command and environment; pod IPs are loopback addresses 127.0.0.2, 127.0.0.3..."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.processes: list[subprocess.Popen[bytes]] = []
        self.pod_ips: dict[str, str] = {}
        self.secrets: dict[str, dict[str, str]] = {}

    def apply(self, manifest: dict[str, Any]) -> None:
        if manifest["kind"] == "Secret":
            self.secrets[manifest["metadata"]["name"]] = manifest["stringData"]
        elif manifest["kind"] == "StatefulSet":
            for index in range(manifest["spec"]["replicas"]):
                self.run_pod(f"{manifest['metadata']['name']}-{index}", manifest)

    def run_pod(self, name: str, stateful_set: dict[str, Any]) -> None:
        pod = stateful_set["spec"]["template"]["spec"]
        container = pod["containers"][0]
        ip = f"127.0.0.{len(self.pod_ips) + 2}"
        self.pod_ips[name] = ip
        mounts = {}
        for volume, mount in zip(pod["volumes"], container["volumeMounts"]):
            directory = self.root / name / volume["name"]
            directory.mkdir(parents=True)
            mounts[mount["mountPath"]] = str(directory)
            if "secret" in volume:
                for item in volume["secret"]["items"]:
                    path = directory / item["path"]
                    path.write_text(self.secrets[volume["secret"]["secretName"]][item["key"]])
                    path.chmod(volume["secret"]["defaultMode"])
        fields = {"status.podIP": ip, "metadata.name": name}
        env = {}
        for variable in container["env"]:
            value = variable.get("value") or fields[variable["valueFrom"]["fieldRef"]["fieldPath"]]
            env[variable["name"]] = self.in_mounts(value, mounts)
        command = [self.in_mounts(re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], word), mounts)
                   for word in container["command"]]
        assert command[0] == "danaus"
        self.processes.append(subprocess.Popen(
            [sys.executable, "-m", "danaus.cli", *command[1:]], cwd=ROOT,
            env={**{k: v for k, v in os.environ.items() if not k.startswith("DANAUS_JOB")}, **env},
            start_new_session=True,
        ))

    @staticmethod
    def in_mounts(value: str, mounts: dict[str, str]) -> str:
        for path, directory in mounts.items():
            value = value.replace(path, directory)
        return value

    def ready(self, manifest: dict[str, Any]) -> int:
        name = manifest["metadata"]["name"]
        return sum((self.root / f"{name}-{i}" / "run" / "address").exists()
                   for i in range(manifest["spec"]["replicas"]))

    def stop(self) -> None:
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            process.wait(30)


def test_the_controller_attaches_to_the_pods_by_their_dns_names(tmp_path, monkeypatch):
    pods = LocalPods(tmp_path / "pods")
    api = RecordingApi(ready=pods.ready)
    recorded_apply = api.apply

    def apply(manifest: dict[str, Any]) -> None:
        recorded_apply(manifest)
        pods.apply(manifest)

    api.apply = apply
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    resolve = socket.getaddrinfo

    def cluster_dns(host, *args, **kwargs):
        pod, _, rest = str(host).partition(".")
        if rest.endswith(".ml.svc"):
            return resolve(pods.pod_ips[pod], *args, **kwargs)
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", cluster_dns)
    applied = job(tmp_path, api, port=port, start_timeout=60)
    try:
        applied.apply()
        key = next(Path(tmp_path / "pods").glob("*/job-key/job.key"))
        assert stat.S_IMODE(key.stat().st_mode) == 0o400
        danaus.configure(transport="tcp")
        state = applied.state()
        names = state.trainers.spawn_procs().spawn("pod", Pod).pod_name.call().get(timeout=120)
        assert sorted(names.values()) == ["danaus-trainers-0", "danaus-trainers-1"]
        generators = state.generators.spawn_procs().spawn("pod", Pod).pod_name.call()
        assert list(generators.get(timeout=120).values()) == ["danaus-generators-0"]
        with pytest.raises(AttributeError, match="no mesh 'evaluators'"):
            _ = state.evaluators
    finally:
        danaus.shutdown()
        applied.kill()
        pods.stop()
    wait_until(lambda: all(p.poll() is not None for p in pods.processes), 30, "the pods to end")
