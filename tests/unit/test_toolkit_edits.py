"""Runtime-config edits beyond the golden files: containerd v1 and empty files, second runs that change one
value, refusal of corrupt or unexpected input, k3s templates, CRI-O, Docker and the JSON splicer."""

from __future__ import annotations

import json

import pytest
import tomlkit

from gpu_operator.agents.shared.files import ConfigFileError
from gpu_operator.agents.toolkit import containerd, crio, docker, k3s
from gpu_operator.agents.toolkit.containerd import ContainerdSettings, Runtime

NVIDIA = Runtime(name="nvidia", binary="/usr/local/nvidia/toolkit/nvidia-container-runtime")
SETTINGS = ContainerdSettings(runtimes=(NVIDIA,))


def _plain(text: str) -> dict[str, object]:
    return dict(tomlkit.parse(text).unwrap())


def test_empty_file_becomes_a_version_2_config() -> None:
    text, previous = containerd.configure_in_place("", path="/etc/containerd/config.toml", settings=SETTINGS)
    assert _plain(text) == {
        "version": 2,
        "plugins": {
            "io.containerd.grpc.v1.cri": {
                "containerd": {
                    "runtimes": {
                        "nvidia": {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": NVIDIA.binary}}
                    }
                }
            }
        },
    }
    assert previous == {}


def test_version_1_config_uses_the_cri_plugin_and_copies_runc() -> None:
    source = '[plugins.cri.containerd.runtimes.runc]\nruntime_type = "io.containerd.runc.v2"\n'
    source += "[plugins.cri.containerd.runtimes.runc.options]\nSystemdCgroup = true\n"
    text, _ = containerd.configure_in_place(source, path="c.toml", settings=SETTINGS)
    nvidia = _plain(text)["plugins"]["cri"]["containerd"]["runtimes"]["nvidia"]  # type: ignore[index]
    assert nvidia == {
        "runtime_type": "io.containerd.runc.v2",
        "options": {"SystemdCgroup": True, "BinaryName": NVIDIA.binary},
    }


def test_a_changed_install_dir_rewrites_only_binary_name() -> None:
    first, _ = containerd.configure_in_place("version = 2\n", path="c.toml", settings=SETTINGS)
    moved = ContainerdSettings(
        runtimes=(Runtime(name="nvidia", binary="/opt/nvidia/toolkit/nvidia-container-runtime"),)
    )
    second, _ = containerd.configure_in_place(first, path="c.toml", settings=moved)
    assert second == first.replace(NVIDIA.binary, "/opt/nvidia/toolkit/nvidia-container-runtime")


def test_default_runtime_and_cdi_are_recorded_for_undo() -> None:
    source = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "crun"\n'
    wanted = ContainerdSettings(runtimes=(NVIDIA,), default_runtime="nvidia", enable_cdi=True)
    text, previous = containerd.configure_in_place(source, path="c.toml", settings=wanted)
    assert previous == {"default_runtime_name": "crun", "enable_cdi": containerd.ABSENT}
    cri = _plain(text)["plugins"]["io.containerd.grpc.v1.cri"]  # type: ignore[index]
    assert cri["enable_cdi"] is True
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    back = containerd.unconfigure_in_place(text, path="c.toml", names=("nvidia",), previous=previous)
    assert back is not None
    assert _plain(back) == _plain(source)


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("version = 2\n[plugins\nx = 1\n", "not valid TOML"),
        ("version = 7\n", "unsupported containerd config version 7"),
        ('version = 2\nplugins = "none"\n', "plugins must be a table"),
    ],
)
def test_unusable_input_is_refused_naming_the_file(source: str, fragment: str) -> None:
    with pytest.raises(ConfigFileError, match=fragment) as caught:
        containerd.configure_in_place(source, path="/etc/containerd/config.toml", settings=SETTINGS)
    assert "/etc/containerd/config.toml" in str(caught.value)


def test_drop_in_is_not_imported_twice_when_a_glob_covers_it() -> None:
    source = 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    main, own, previous = containerd.drop_in(
        source, main_path="c.toml", drop_in_path="/etc/containerd/conf.d/99-nvidia.toml", settings=SETTINGS
    )
    assert main == source
    assert previous == {}
    assert "BinaryName" in own


def test_drop_in_import_is_added_and_removed_when_the_key_was_absent() -> None:
    source = 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "pause:3.9"\n'
    path = "/etc/containerd/conf.d/99-nvidia.toml"
    main, own, previous = containerd.drop_in(source, main_path="c.toml", drop_in_path=path, settings=SETTINGS)
    assert _plain(main)["imports"] == [path]
    # The CRI section is copied whole: containerd < 2.1 would otherwise drop sandbox_image.
    assert _plain(own)["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"] == "pause:3.9"  # type: ignore[index]
    assert containerd.remove_drop_in_import(main, main_path="c.toml", drop_in_path=path, previous=previous) == source


def test_k3s_template_skips_runtimes_k3s_already_renders() -> None:
    template = '{{ template "base" . }}\n'
    rendered = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\nruntime_type = "x"\n'
    both = ContainerdSettings(runtimes=(NVIDIA, Runtime(name="nvidia-cdi", binary="/x/cdi")))
    out = k3s.configure_template(template, path="config.toml.tmpl", version=2, settings=both, rendered=rendered)
    assert "runtimes.nvidia-cdi]" in out
    assert "runtimes.nvidia]" not in out
    assert out.startswith(template)
    assert k3s.unconfigure_template(out) == template


def test_k3s_template_with_a_directive_inside_toml_is_refused() -> None:
    with pytest.raises(ConfigFileError, match=r"config\.toml\.tmpl: not valid TOML"):
        k3s.configure_template(
            "[plugins]\n  x = {{ .Value }}\n", path="config.toml.tmpl", version=2, settings=SETTINGS, rendered=None
        )


def test_k3s_block_is_stable_and_strips_cleanly() -> None:
    template = '{{ template "base" . }}\n\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "/x"\n'
    once = k3s.configure_template(template, path="t.tmpl", version=2, settings=SETTINGS, rendered=None)
    assert k3s.configure_template(once, path="t.tmpl", version=2, settings=SETTINGS, rendered=None) == once
    assert k3s.strip_block(once) == template


def test_crio_drop_in_copies_the_default_runtime_entry() -> None:
    main = '[crio.runtime]\ndefault_runtime = "crun"\n'
    main += '[crio.runtime.runtimes.crun]\nmonitor_path = "/usr/libexec/crio/conmon"\n'
    own = crio.drop_in(main, main_path="crio.conf", runtimes=(NVIDIA,), default_runtime="nvidia")
    plain = _plain(own)["crio"]["runtime"]  # type: ignore[index]
    assert plain["default_runtime"] == "nvidia"
    assert plain["runtimes"]["nvidia"] == {
        "runtime_path": NVIDIA.binary,
        "monitor_path": "/usr/libexec/crio/conmon",
        "runtime_type": "oci",
    }


def test_docker_refuses_a_non_object_and_names_the_file() -> None:
    with pytest.raises(ConfigFileError, match=r"/etc/docker/daemon\.json: the top level must be a JSON object"):
        docker.configure(
            "[1, 2]", path="/etc/docker/daemon.json", runtimes=(NVIDIA,), default_runtime=None, enable_cdi=False
        )


def test_docker_missing_file_round_trips_to_nothing() -> None:
    text, previous = docker.configure(
        None, path="d.json", runtimes=(NVIDIA,), default_runtime="nvidia", enable_cdi=True
    )
    assert json.loads(text) == {
        "runtimes": {"nvidia": {"path": NVIDIA.binary, "args": []}},
        "default-runtime": "nvidia",
        "features": {"cdi": True},
    }
    assert docker.unconfigure(text, path="d.json", names=("nvidia",), previous=previous) == "{}\n"
    # (configure.plan_unconfigure then removes a file it created: see test_toolkit_program.)


def test_jsonedit_keeps_untouched_members_byte_for_byte() -> None:
    source = '{"a":1,   "b" : [1,2],\n "c": {"x": true}}'
    edited = docker.set_member(source, path=["c"], key="y", value=2)
    assert edited.startswith('{"a":1,   "b" : [1,2],\n "c": {"x": true')
    assert json.loads(edited) == {"a": 1, "b": [1, 2], "c": {"x": True, "y": 2}}
    assert docker.remove_member(edited, path=["c"], key="y") == source
    assert docker.remove_member(source, path=[], key="a") == '{"b" : [1,2],\n "c": {"x": true}}'
    assert docker.set_member(source, path=[], key="a", value=1) == source


def test_version_4_config_of_containerd_2_3_gets_the_runtime_without_enable_cdi() -> None:
    # The config a containerd 2.4 node runs with (localcluster's real nodes write this shape).
    source = (
        'version = 4\n[plugins."io.containerd.cri.v1.runtime".containerd]\ndefault_runtime_name = "runc"\n'
        '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]\nruntime_type = "io.containerd.runc.v2"\n'
        '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]\nSystemdCgroup = false\n'
    )
    settings = ContainerdSettings(runtimes=(NVIDIA,), enable_cdi=True)
    text, previous = containerd.configure_in_place(source, path="config.toml", settings=settings)
    runtime = _plain(text)["plugins"]["io.containerd.cri.v1.runtime"]  # type: ignore[index]
    nvidia = runtime["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"] == {"SystemdCgroup": False, "BinaryName": NVIDIA.binary}
    assert "enable_cdi" not in runtime  # CDI is always on from version 4: the key no longer exists
    assert previous == {}
    assert containerd.runtime_names(tomlkit.parse(text), version=4) >= {"runc", "nvidia"}
