"""Simulated GPU nodes on a real control plane: they run the real agents against simulated GPUs.

:class:`~gpu_operator.sim.control.simulator.Simulator` registers Nodes shaped by the GPU catalog's profiles (NFD
labels, capacity, nodeInfo), keeps them Ready from one shared heartbeat loop, and acts as their kubelet:
pods bound to them run as in-process programs (``gpu-operator agent NAME`` looked up in a program
registry), with the device-plugin and PodResources gRPC APIs served on each node's own sockets. Faults
(XID, lost GPU, kubelet restart, NotReady, agent crash) are injected from Python or ``gpu-operator sim
fault``. One event loop in one process serves every node, so a thousand nodes fit on a laptop.

Nodes may also carry Mellanox NICs (``nics``: models, OS/kernel pools) for the network operator, whose
containers run stand-ins (``programs/netstandins``).

Folders by job (the REST client over one connection pool is ``kube.restclient``): ``objects``,
``shapes``, ``nics`` and ``hardware`` (the Node/Lease JSON, node specs, NIC models, fake PCI trees); ``kubelet/`` (the
simulated kubelet: ``heartbeat``, ``podspec``/``podstatus``/``volumes`` for reading pods and reporting
their status, ``devices`` and ``gpuplugin`` for the device manager and the simulator's own GPU plugin,
``host``, ``runtime`` for one pod, ``node`` for one node, ``podwatch`` for the shared pod watch);
``programs/`` (what runs in a container: ``programs``, ``context``, ``launcher``, ``agents`` and the
operator's own pod, ``operatorpod``); ``control/`` (``simulator``, ``faults`` and ``server``, the
``sim up`` control socket); ``fakedriver/`` (the fake NVIDIA driver for real nodes).
"""
