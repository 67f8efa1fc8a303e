"""The cluster commands fail in one line naming the kubeconfig or the API server, never a traceback; and
``upgrade plan --policy`` checks the proposed policy offline before it asks the cluster anything.

No socket is opened: the client factories raise the exceptions the client library raises for a
refused connection, a TLS failure or a 401/403, and the kubeconfig cases are files.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path

import httpx
import httpx2
import pytest
from click.testing import CliRunner, Result
from lightkube import ApiError

from gpu_operator.cli.main import cli
from gpu_operator.kube import connect
from gpu_operator.kube.errors import describe
from gpu_operator.kube.restclient import ApiError as RestApiError
from tests.conftest import SAMPLES

SERVER = "https://10.0.0.1:6443"
COMMANDS = (["status"], ["upgrade", "plan"], ["upgrade", "rollback"])

KUBECONFIG = f"""apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "{SERVER}"}}
users:
- name: u
  user: {{token: secret}}
contexts:
- name: ctx
  context: {{cluster: c, user: u}}
current-context: ctx
"""


def _request() -> httpx2.Request:
    return httpx2.Request("GET", f"{SERVER}/api/v1/nodes")


def _refused() -> Exception:
    return httpx2.ConnectError("[Errno 111] Connection refused", request=_request())


def _tls() -> Exception:
    try:
        raise ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    except ssl.SSLError as cause:
        try:
            raise httpx2.ConnectError(str(cause), request=_request()) from cause
        except httpx2.ConnectError as error:
            return error


def _status(code: int, message: str) -> Exception:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": message}
    return ApiError(request=_request(), response=httpx2.Response(code, json=body, request=_request()))


FAILURES: list[tuple[Callable[[], Exception], str]] = [
    (_refused, f"Error: the API server {SERVER} cannot be reached: [Errno 111] Connection refused"),
    (_tls, f"Error: the API server {SERVER}: TLS error: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"),
    (lambda: _status(401, "Unauthorized"), f"Error: the API server {SERVER} refused the credentials "
                                           "(401 Unauthorized): Unauthorized"),
    (lambda: _status(403, 'nodes is forbidden: User "bob" cannot list resource "nodes"'),
     f'Error: the API server {SERVER} forbids this (403 Forbidden): nodes is forbidden: User "bob" cannot list '
     'resource "nodes"'),
]  # fmt: skip


def _one_line(result: Result) -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (1, 2), result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "config"
    path.write_text(KUBECONFIG, encoding="utf-8")
    return path


@pytest.mark.parametrize(("make", "line"), FAILURES, ids=["refused", "tls", "401", "403"])
def test_an_api_server_failure_is_one_line_naming_the_server(
    monkeypatch: pytest.MonkeyPatch, kubeconfig: Path, make: Callable[[], Exception], line: str
) -> None:
    def fail(**_: object) -> object:
        raise make()

    monkeypatch.setattr(connect, "sync_client", fail)
    monkeypatch.setattr(connect, "async_client", fail)
    for args in COMMANDS:
        result = CliRunner().invoke(cli, [*args, "--kubeconfig", str(kubeconfig)])
        assert result.exit_code == 1
        assert _one_line(result) == line, args


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("a: [1\n", ":2:1: invalid YAML: expected ',' or ']', but got '<stream end>'"),
        ("- 1\n", ": must be a mapping (kind: Config)"),
        ("apiVersion: v1\nkind: Config\n", ": sets no current-context"),
        (KUBECONFIG.replace("current-context: ctx", "current-context: other"),
         ": current-context 'other' names no entry of contexts"),
        (KUBECONFIG.replace("{cluster: c,", "{cluster: gone,"),
         ": context 'ctx' names cluster 'gone', which is not listed"),
        (KUBECONFIG.replace("clusters:\n- name: c\n", "clusters:\n- nom: c\n"),
         ": clusters must be a list of entries, each with a name and a cluster mapping"),
        (KUBECONFIG.replace("users:", "users: 3\nx:"),
         ": users must be a list of entries, each with a name and a user mapping"),
        (KUBECONFIG.replace('server: "', 'certificate-authority: /nonexistent/ca.crt, server: "'),
         ": cluster 'c' certificate-authority: /nonexistent/ca.crt: cannot read: No such file or directory"),
        (KUBECONFIG.replace("{token: secret}", "{client-certificate: /dev/zero}"),
         ": user 'u' client-certificate: /dev/zero: is a character device, not a regular file"),
    ],
)  # fmt: skip
def test_a_kubeconfig_that_cannot_work_is_one_line_naming_it(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "config"
    path.write_text(text, encoding="utf-8")
    for args in COMMANDS:
        result = CliRunner().invoke(cli, [*args, "--kubeconfig", str(path)])
        assert _one_line(result) == f"Error: kubeconfig {path}{why}", args


def test_no_kubeconfig_anywhere_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    for args in COMMANDS:
        line = _one_line(CliRunner().invoke(cli, args))
        assert line == "Error: kubeconfig: Configuration file ~/.kube/config not found", args


def test_a_file_error_names_the_file_and_one_without_a_file_is_not_hidden(
    monkeypatch: pytest.MonkeyPatch, kubeconfig: Path
) -> None:
    def missing(**_: object) -> object:
        raise FileNotFoundError(2, "No such file or directory", "/var/run/token")

    monkeypatch.setattr(connect, "sync_client", missing)
    result = CliRunner().invoke(cli, ["status", "--kubeconfig", str(kubeconfig)])
    assert _one_line(result) == "Error: /var/run/token: No such file or directory"

    def nameless(**_: object) -> object:
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(connect, "sync_client", nameless)
    result = CliRunner().invoke(cli, ["status", "--kubeconfig", str(kubeconfig)])
    assert isinstance(result.exception, FileNotFoundError)


def test_a_programming_error_is_not_swallowed(monkeypatch: pytest.MonkeyPatch, kubeconfig: Path) -> None:
    def broken(**_: object) -> object:
        raise KeyError("a bug")

    monkeypatch.setattr(connect, "sync_client", broken)
    result = CliRunner().invoke(cli, ["status", "--kubeconfig", str(kubeconfig)])
    assert isinstance(result.exception, KeyError)


def test_an_invalid_proposed_policy_is_refused_before_any_cluster_call(
    monkeypatch: pytest.MonkeyPatch, kubeconfig: Path, tmp_path: Path
) -> None:
    asked: list[str] = []

    def client(**_: object) -> object:
        asked.append("client")
        raise _refused()

    monkeypatch.setattr(connect, "async_client", client)
    monkeypatch.setattr(connect, "sync_client", client)
    policy = tmp_path / "policy.yaml"
    text = (SAMPLES / "clusterpolicy-minimal.yaml").read_text(encoding="utf-8")
    policy.write_text(text.replace("spec: {}", "spec: {driver: {enabled: maybe}}"), encoding="utf-8")
    result = CliRunner().invoke(cli, ["upgrade", "plan", "--kubeconfig", str(kubeconfig), "--policy", str(policy)])
    assert result.exit_code == 1
    assert _one_line(result).startswith(f"error: {policy}: ClusterPolicy cluster-policy: spec.driver.enabled: must be")
    assert asked == []
    ofed = tmp_path / "ncp.yaml"
    ofed.write_text("apiVersion: mellanox.com/v1alpha1\nkind: NicClusterPolicy\nmetadata: {name: Bad_Name}\n")
    result = CliRunner().invoke(cli, ["upgrade", "plan", "--driver", "ofed", "--kubeconfig", str(kubeconfig),
                                      "--policy", str(ofed)])  # fmt: skip
    assert result.exit_code == 1, result.output
    assert f"error: {ofed}: NicClusterPolicy Bad_Name: metadata.name: " in result.output
    assert asked == []


def test_the_simulators_client_errors_are_described_and_nothing_else_is() -> None:
    assert describe(RestApiError(code=403, reason="Forbidden", message="no")) == (
        "the API server forbids this (403 Forbidden): no"
    )
    assert describe(httpx.ConnectError("refused")) == "the API server cannot be reached: refused"
    assert describe(KeyError("a bug")) is None
    assert describe(ValueError("a bug")) is None


@pytest.mark.parametrize(("make", "line"), FAILURES, ids=["refused", "tls", "401", "403"])
def test_the_crds_hook_says_which_server_failed_and_how(
    monkeypatch: pytest.MonkeyPatch, kubeconfig: Path, make: Callable[[], Exception], line: str
) -> None:
    def fail(**_: object) -> object:
        raise make()

    monkeypatch.setattr(connect, "sync_client", fail)
    result = CliRunner().invoke(cli, ["crds", "apply", "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 1
    assert _one_line(result) == line.replace("Error: ", "error: gpu-operator crds apply: ", 1)


def test_a_kubeconfig_list_in_the_environment_is_refused_naming_it(tmp_path: Path, kubeconfig: Path) -> None:
    listed = f"{kubeconfig}:{tmp_path / 'other'}"
    result = CliRunner().invoke(cli, ["status"], env={"KUBECONFIG": listed})
    assert _one_line(result) == f"Error: kubeconfig {listed}: a list of files; name one with --kubeconfig"
