"""Pure parts of the local control plane: kubeconfig rendering, component flags, binary lookup, state file."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
import yaml

from gpu_operator.localcluster.binaries import BinariesNotFoundError, KubeBinaries, locate_binaries
from gpu_operator.localcluster.components import component_specs, health_url
from gpu_operator.localcluster.kubeconfig import KubeconfigUser, kubeconfig_dict, render_kubeconfig
from gpu_operator.localcluster.layout import Layout, Ports
from gpu_operator.localcluster.state import ClusterState, ComponentState, read_state, write_state

PORTS = Ports(etcd_client=2379, etcd_peer=2380, apiserver=6443, controller_manager=10257, scheduler=10259)


def test_kubeconfig_embeds_ca_and_client_cert() -> None:
    user = KubeconfigUser(name="admin", client_cert_pem=b"CERT", client_key_pem=b"KEY")
    text = render_kubeconfig(cluster_name="local", server="https://127.0.0.1:6443", ca_pem=b"CA", user=user)
    doc = yaml.safe_load(text)
    assert doc["current-context"] == "local"
    assert doc["contexts"] == [{"name": "local", "context": {"cluster": "local", "user": "admin"}}]
    cluster = doc["clusters"][0]["cluster"]
    assert cluster["server"] == "https://127.0.0.1:6443"
    assert base64.b64decode(cluster["certificate-authority-data"]) == b"CA"
    entry = doc["users"][0]["user"]
    assert base64.b64decode(entry["client-certificate-data"]) == b"CERT"
    assert base64.b64decode(entry["client-key-data"]) == b"KEY"


def test_kubeconfig_token_user_and_namespace() -> None:
    doc = kubeconfig_dict(
        cluster_name="c", server="https://h", ca_pem=b"x", user=KubeconfigUser(name="sa", token="t"), namespace="ns"
    )
    assert doc["users"] == [{"name": "sa", "user": {"token": "t"}}]
    assert doc["contexts"][0]["context"]["namespace"] == "ns"


def test_kubeconfig_user_needs_credentials() -> None:
    with pytest.raises(ValueError, match="neither a client certificate nor a token"):
        KubeconfigUser(name="nobody").as_entry()


def test_component_flags(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    specs = component_specs(
        binaries=_fake_binaries(bin_dir),
        layout=Layout(root=tmp_path),
        ports=PORTS,
        extra_args={"kube-scheduler": ["-v=2"]},
    )
    assert list(specs) == ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]
    apiserver = specs["kube-apiserver"].argv
    assert apiserver[0] == str(bin_dir / "kube-apiserver")
    for flag in (
        "--authorization-mode=Node,RBAC",
        "--allow-privileged=true",
        "--secure-port=6443",
        "--bind-address=127.0.0.1",
        "--etcd-servers=http://127.0.0.1:2379",
        f"--client-ca-file={tmp_path / 'pki' / 'ca.crt'}",
    ):
        assert flag in apiserver
    assert not any(arg.startswith("--disable-admission-plugins") for arg in apiserver)  # PodSecurity stays on
    for name in ("kube-controller-manager", "kube-scheduler"):
        assert "--leader-elect=false" in specs[name].argv
    assert "--controllers=*" in specs["kube-controller-manager"].argv
    assert specs["kube-scheduler"].argv[-1] == "-v=2"
    assert specs["etcd"].log_path == tmp_path / "logs" / "etcd.log"
    assert health_url(component="kube-apiserver", ports=PORTS) == "https://127.0.0.1:6443/readyz"
    with pytest.raises(ValueError, match="unknown components"):
        component_specs(
            binaries=_fake_binaries(bin_dir), layout=Layout(root=tmp_path), ports=PORTS, extra_args={"x": []}
        )


def _fake_binaries(bin_dir: Path) -> KubeBinaries:
    return KubeBinaries(bin_dir=bin_dir, source="test")


def test_locate_binaries_prefers_env_and_reports_missing(tmp_path: Path) -> None:
    for name in ("etcd", "kube-apiserver"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        os.chmod(tmp_path / name, 0o755)
    found = locate_binaries(required=["etcd", "kube-apiserver"], environ={"GPU_OPERATOR_KUBE_BIN_DIR": str(tmp_path)})
    assert found.bin_dir == tmp_path.resolve()
    assert found.source == "$GPU_OPERATOR_KUBE_BIN_DIR"
    with pytest.raises(BinariesNotFoundError, match="lacks kube-scheduler"):
        locate_binaries(required=["etcd", "kube-scheduler"], environ={"KUBEBUILDER_ASSETS": str(tmp_path)})
    with pytest.raises(BinariesNotFoundError, match="not a directory"):
        locate_binaries(environ={"GPU_OPERATOR_KUBE_BIN_DIR": str(tmp_path / "nope")})
    # In a checkout without the variables, and building disabled: say what to run.
    with pytest.raises(BinariesNotFoundError, match=r"is not set; run `bash .*build-kube\.sh`"):
        locate_binaries(environ={}, build=False)


def test_state_file_round_trip(tmp_path: Path) -> None:
    state = ClusterState(
        pid=os.getpid(),
        pid_start=None,
        phase="ready",
        detached=True,
        started_at=1.0,
        server="https://127.0.0.1:1",
        components={"etcd": ComponentState(pid=None, log="/x/etcd.log")},
    )
    write_state(state_dir=tmp_path, state=state)
    assert read_state(state_dir=tmp_path) == state
    assert not state.owner_alive()  # a pid whose start time does not match is not ours
    (tmp_path / "state.json").write_text("{not json")
    assert read_state(state_dir=tmp_path) is None
