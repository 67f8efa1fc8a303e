"""Simulated GPU nodes on a real control plane: they run the real agents against simulated GPUs.

:class:`~gpu_operator.sim.simulator.Simulator` registers Nodes shaped by the GPU catalog's profiles (NFD
labels, capacity, nodeInfo), keeps them Ready from one shared heartbeat loop, and acts as their kubelet:
pods bound to them run as in-process programs (``gpu-operator agent NAME`` looked up in a program
registry), with the device-plugin and PodResources gRPC APIs served on each node's own sockets. Faults
(XID, lost GPU, kubelet restart, NotReady, agent crash) are injected from Python or ``gpu-operator sim
fault``. One event loop in one process serves every node, so a thousand nodes fit on a laptop.

Modules, bottom up (the REST client over one connection pool is ``kube.restclient``): ``objects`` and ``shapes`` (the
Node/Lease JSON, node specs), ``heartbeat``, ``programs``/``context``/``launcher`` (what runs in a
container), ``podspec``/``podstatus``/``volumes`` (the kubelet's reading of pods and its status reports),
``devices`` and ``gpuplugin`` (device manager, the simulator's own GPU plugin), ``host``, ``runtime`` (one
pod), ``node`` (one node), ``podwatch`` (the shared pod watch), ``faults``, ``simulator``, ``control`` (the
``sim up`` control socket) and ``agents`` (the operator's agents as programs).
"""
