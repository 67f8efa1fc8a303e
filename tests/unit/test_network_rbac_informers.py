"""The network operator's own caches fit its generated RBAC: every informer may list and watch what it
reads, where it reads it. A watch the chart's Role refused (controllerrevisions lacked ``watch``) never
failed a pass: the informer only listed again and again, which the integration test
(tests/integration/test_network_helm_install.py) caught and this test now catches without a cluster."""

from __future__ import annotations

from gpu_operator.kube.api import resource
from gpu_operator.reconcile.network.operator import network_informers
from gpu_operator.render.network_rbac import OWN_CLUSTER_RULES, OWN_NAMESPACE_RULES
from gpu_operator.render.rbac import READ, Rule, covers


def test_every_informer_may_list_and_watch_what_it_reads() -> None:
    # Building informers makes no request: any client object will do.
    informers = network_informers(
        object(), namespace="nvidia-network-operator", wake_all=lambda: None, wake_upgrade=lambda: None
    )
    assert informers
    for informer in informers:
        info = resource(informer.api_version, informer.kind)._api_info
        needed = Rule((info.resource.group,), (info.plural,), READ)
        # A namespaced informer is served by the Role in the namespace or by the ClusterRole.
        held = OWN_CLUSTER_RULES + (OWN_NAMESPACE_RULES if informer.namespace else ())
        assert covers(held, needed), f"{informer.kind} informer: {needed} is not granted"
