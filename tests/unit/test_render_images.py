"""Image resolution (reference §3.4 with our default): explicit fields win, then the operator's
``*_IMAGE`` variables, then the agent image; a partial triple is an error naming the section."""

from __future__ import annotations

import pytest

from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.api.nvidiadriver import NVIDIADriver
from gpu_operator.render import ClusterFacts, OperatorSettings, RenderError, render
from gpu_operator.render.driverconfig import from_nvidiadriver
from gpu_operator.render.images import ImageSource, resolve_image

AGENT = "ghcr.io/gpu-operator-py/gpu-operator:v0.1.0"
FACTS = ClusterFacts(namespace="gpu-operator", gpu_node_count=1, os_tag="ubuntu22.04", has_nfd_labels=True)


def resolve(source: ImageSource, *, env: dict[str, str] | None = None, os_suffix: str | None = None) -> str:
    return resolve_image(
        source,
        field="spec.toolkit",
        env_var="CONTAINER_TOOLKIT_IMAGE",
        image_env=env or {},
        agent_image=AGENT,
        os_suffix=os_suffix,
    ).reference


def test_nothing_set_runs_the_agent_image() -> None:
    result = resolve_image(
        ImageSource(), field="spec.toolkit", env_var="CONTAINER_TOOLKIT_IMAGE", image_env={}, agent_image=AGENT
    )
    assert (result.reference, result.explicit) == (AGENT, False)


def test_operator_env_variable_is_the_fallback() -> None:
    assert (
        resolve(ImageSource(), env={"CONTAINER_TOOLKIT_IMAGE": "mirror/toolkit@sha256:aa"})
        == "mirror/toolkit@sha256:aa"
    )


def test_image_alone_is_a_full_reference() -> None:
    assert (
        resolve(ImageSource(image="registry.local/tk:1.0"), env={"CONTAINER_TOOLKIT_IMAGE": "x"})
        == "registry.local/tk:1.0"
    )


def test_triple_builds_a_tag_and_a_digest() -> None:
    assert resolve(ImageSource(repository="reg/nvidia/", image="tk", version="v1")) == "reg/nvidia/tk:v1"
    assert resolve(ImageSource(repository="reg", image="tk", version="sha256:abc")) == "reg/tk@sha256:abc"


def test_os_suffix_goes_on_tags_but_never_on_digests() -> None:
    assert resolve(ImageSource(repository="r", image="driver", version="595.91.07"), os_suffix="ubuntu22.04") == (
        "r/driver:595.91.07-ubuntu22.04"
    )
    assert resolve(ImageSource(repository="r", image="driver", version="sha256:ff"), os_suffix="rhel9") == (
        "r/driver@sha256:ff"
    )


@pytest.mark.parametrize(
    ("source", "missing"),
    [
        (ImageSource(repository="r", image="i"), "version"),
        (ImageSource(version="v1"), "repository, image"),
        (ImageSource(repository="r", version="v1"), "image"),
    ],
)
def test_partial_triple_is_an_error_naming_the_field(source: ImageSource, missing: str) -> None:
    with pytest.raises(RenderError, match=rf"spec\.toolkit: .*\(missing: {missing}\)"):
        resolve(source)


def _images(policy: ClusterPolicy, *, settings: OperatorSettings | None = None) -> dict[str, str]:
    out = {}
    for state in render(policy, FACTS, operator=settings or OperatorSettings(agent_image=AGENT)):
        for obj in state.objects:
            if obj["kind"] == "DaemonSet":
                pod = obj["spec"]["template"]["spec"]
                for c in [*pod.get("initContainers", []), *pod["containers"]]:
                    out[f"{obj['metadata']['name']}/{c['name']}"] = c["image"]
    return out


def test_render_uses_our_image_by_default_and_nvidia_contract_for_another_image() -> None:
    policy = ClusterPolicy.model_validate(
        {
            "metadata": {"name": "p"},
            "spec": {
                "driver": {"repository": "reg.local/nvidia", "image": "driver", "version": "595.91.07"},
                "validator": {"image": "reg.local/validator:v1"},
            },
        }
    )
    images = _images(policy)
    # A driver image tagged by OS: one DaemonSet per OS tag of the GPU nodes, named after it.
    driver = "nvidia-driver-daemonset-ubuntu22.04"
    assert images[f"{driver}/nvidia-driver-ctr"] == "reg.local/nvidia/driver:595.91.07-ubuntu22.04"
    assert images["nvidia-device-plugin-daemonset/toolkit-validation"] == "reg.local/validator:v1"
    assert images["nvidia-device-plugin-daemonset/nvidia-device-plugin"] == AGENT
    assert images[f"{driver}/k8s-driver-manager"] == AGENT  # the manager follows its own section


def test_render_takes_the_operator_env_override() -> None:
    policy = ClusterPolicy.model_validate({"metadata": {"name": "p"}})
    settings = OperatorSettings.from_env({"AGENT_IMAGE": AGENT, "DEVICE_PLUGIN_IMAGE": "olm/dp@sha256:01"})
    images = _images(policy, settings=settings)
    assert images["nvidia-device-plugin-daemonset/nvidia-device-plugin"] == "olm/dp@sha256:01"
    assert images["gpu-feature-discovery/gpu-feature-discovery"] == AGENT


def test_render_rejects_a_partial_triple_that_bypassed_validation() -> None:
    policy = ClusterPolicy.model_validate({"metadata": {"name": "p"}})
    policy.spec.dcgm_exporter.repository = "reg.local"  # assignment is not validated: as if from model_construct
    with pytest.raises(RenderError, match=r"spec\.dcgmExporter: .*missing: image, version") as caught:
        render(policy, FACTS, operator=OperatorSettings(agent_image=AGENT))
    assert caught.value.state == "state-dcgm-exporter"


def test_nvidiadriver_default_image_alone_means_our_image() -> None:
    plain = NVIDIADriver.model_validate({"metadata": {"name": "d"}})
    assert from_nvidiadriver(plain).source == ImageSource(repository=None, image="", version=None)
    pinned = NVIDIADriver.model_validate({"metadata": {"name": "d"}, "spec": {"version": "595.91.07"}})
    assert from_nvidiadriver(pinned).source == ImageSource(
        repository="nvcr.io/nvidia", image="driver", version="595.91.07"
    )
