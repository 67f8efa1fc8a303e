"""lightkube's typed objects, for the code that shows or builds whole typed resources: the demo's
progress views and workloads, and the tests. Everything else speaks plain dicts through ``kube.api``.

Importing them from here keeps the one rule the import contracts check: only ``kube`` and
``localcluster`` import the client library, so a change of client touches one package.
"""

from __future__ import annotations

from lightkube import ApiError, AsyncClient, Client, KubeConfig, codecs
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import ConfigMap, Event, Namespace, Node, Pod
from lightkube.types import PatchType

__all__ = [
    "ApiError",
    "AsyncClient",
    "Client",
    "ConfigMap",
    "DaemonSet",
    "Event",
    "KubeConfig",
    "Namespace",
    "Node",
    "ObjectMeta",
    "PatchType",
    "Pod",
    "codecs",
]
