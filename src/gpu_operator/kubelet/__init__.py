"""The kubelet's gRPC APIs: the device-plugin API v1beta1 and the PodResources API v1.

``api/`` holds the hand-written ``.proto`` files and the generated modules (``hack/gen-proto.sh``). The
small helpers around them serve both sides, so the simulated kubelet (``gpu_operator.sim``) and the node
agents (the device plugin, the exporter) speak the same wire format:

* ``paths``: socket names and paths, API constants, ``unix://`` targets (with the 107-byte path limit).
* ``registration``: the kubelet's ``Registration`` server and the plugin-side ``register`` call.
* ``plugin_client``: the kubelet-side client of one device plugin (options, ListAndWatch, allocation).
* ``podresources``: the ``PodResourcesLister`` server and a client.
* ``allocation``: plain data for devices and allocations, converted from and to the protobuf messages.

gRPC is imported lazily by the modules that talk over sockets, never by ``paths`` or ``allocation``.
"""
