"""The inputs of one state's rendering, and the questions every operand asks of them.

A :class:`RenderContext` wraps the policy spec, the cluster facts and the operator settings, and
answers: which image and pull settings a section resolves to, which runtime class operand pods use,
where the host paths are, and whether a ConfigMap or Secret the policy names exists. Missing
references and notes are collected per state (one context per state), so the reconciler can report
"ConfigMap X named by spec.devicePlugin.config.name does not exist" on the right state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpu_operator.api.clusterpolicy import ClusterPolicySpec
from gpu_operator.api.defaults import is_enabled
from gpu_operator.render.agents import AGENTS
from gpu_operator.render.facts import ClusterFacts, OperatorSettings
from gpu_operator.render.images import ImageSource, ResolvedImage, resolve_image
from gpu_operator.render.implementations import Choice, choose

JSON = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class MissingReference:
    """An object the policy names that does not exist in the operator namespace."""

    kind: str
    name: str
    field: str
    namespace: str

    @property
    def message(self) -> str:
        return f"{self.kind} {self.name!r} named by {self.field} does not exist in namespace {self.namespace}"


def section_of(spec: ClusterPolicySpec, name: str) -> Any:
    """The spec section whose JSON name is ``name`` (``devicePlugin`` -> ``spec.device_plugin``)."""
    for attr, info in ClusterPolicySpec.model_fields.items():
        if (info.alias or attr) == name:
            return getattr(spec, attr)
    raise KeyError(name)


def source_of(section: Any) -> ImageSource:
    return ImageSource(
        repository=getattr(section, "repository", None),
        image=getattr(section, "image", None),
        version=getattr(section, "version", None),
    )


@dataclass(kw_only=True)
class RenderContext:
    spec: ClusterPolicySpec
    facts: ClusterFacts
    settings: OperatorSettings
    missing: list[MissingReference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Parts of the state left out because their agent is not in the image (reported, never deployed).
    refusals: list[str] = field(default_factory=list)

    @property
    def namespace(self) -> str:
        return self.facts.namespace

    def fresh(self) -> RenderContext:
        """A context for the next state: same inputs, empty problem lists."""
        return RenderContext(spec=self.spec, facts=self.facts, settings=self.settings)

    def agent_available(self, agent: str, *, part: str) -> bool:
        """True when the image has ``agent``; otherwise ``part`` is recorded as refused."""
        if agent in AGENTS:
            return True
        self.refusals.append(f"{part} not deployed: this operator's image has no agent {agent}")
        return False

    # Images -------------------------------------------------------------------------------------

    def image(self, section: Any, *, field: str, env_var: str | None, os_suffix: str | None = None) -> ResolvedImage:
        return resolve_image(
            source_of(section),
            field=field,
            env_var=env_var,
            image_env=self.settings.image_env,
            agent_image=self.settings.agent_image,
            os_suffix=os_suffix,
        )

    def implementation(self, section: Any, *, field: str, env_var: str | None) -> Choice:
        """Our agent or NVIDIA's contract for ``section`` (``render.implementations``); NVIDIA's is noted."""
        image = self.image(section, field=field, env_var=env_var)
        forced = getattr(section, "implementation", None)
        choice = choose(forced=forced, image=image, agent_image=self.settings.agent_image, field=field)
        if choice.nvidia:
            self.notes.append(f"NVIDIA's contract: {choice.why}")
        return choice

    def pull_policy(self, section: Any) -> str:
        return getattr(section, "image_pull_policy", None) or self.settings.pull_policy

    def pull_secrets(self, *sections: Any) -> list[JSON]:
        """``imagePullSecrets`` of the pod: every named Secret of the sections, in order, once."""
        names: list[str] = []
        for section in sections:
            for name in getattr(section, "image_pull_secrets", None) or []:
                if name not in names:
                    names.append(name)
        return [{"name": n} for n in names]

    # Runtime ------------------------------------------------------------------------------------

    @property
    def cdi(self) -> bool:
        return self.spec.cdi.enabled

    @property
    def nri(self) -> bool:
        return self.spec.cdi.nri_plugin_enabled

    def runtime_class(self) -> str | None:
        """The runtime class of GPU-using operand pods; None under NRI, and on CRI-O without CDI (hook mode)."""
        if self.nri or (self.facts.runtime == "crio" and not self.cdi):
            return None
        return self.spec.operator.runtime_class

    # Host paths ---------------------------------------------------------------------------------

    @property
    def root_fs(self) -> str:
        return self.spec.host_paths.root_fs or "/"

    @property
    def driver_install_dir(self) -> str:
        return self.spec.host_paths.driver_install_dir or "/run/nvidia/driver"

    @property
    def kubelet_dir(self) -> str:
        return self.spec.host_paths.kubelet_root_dir.rstrip("/") or "/var/lib/kubelet"

    @property
    def containerized_driver(self) -> bool:
        """Whether a driver container (ClusterPolicy or NVIDIADriver) provides the driver."""
        return is_enabled(self.spec, section="driver")

    @property
    def driver_root(self) -> str:
        return self.driver_install_dir if self.containerized_driver else self.root_fs

    # References ---------------------------------------------------------------------------------

    def require(self, kind: str, name: str | None, *, field: str) -> str | None:
        """Record ``name`` as missing when the facts list the namespace's objects and it is not there."""
        if not name:
            return None
        known = self.facts.configmaps if kind == "ConfigMap" else self.facts.secrets
        if known is not None and name not in known:
            self.missing.append(MissingReference(kind=kind, name=name, field=field, namespace=self.namespace))
        return name

    def config_map_keys(self, name: str) -> tuple[str, ...] | None:
        """The keys of ConfigMap ``name`` in the operator namespace, sorted; None when the facts do not
        know them (offline, or the ConfigMap does not exist)."""
        known = self.facts.configmap_keys
        return None if known is None else known.get(name)

    def note(self, text: str) -> None:
        """Record a note once (a state renders one DaemonSet per pool with the same settings)."""
        if text not in self.notes:
            self.notes.append(text)
