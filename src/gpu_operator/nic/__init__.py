"""The node's network functions (NICs): what PCI, sysfs and the RDMA core say about them.

A layer beside :mod:`gpu_operator.gpu`: agents that need NIC facts (the RDMA shared and SR-IOV
device plugins, NIC feature discovery) read them through a :class:`~gpu_operator.nic.types.NicBackend`
from :func:`gpu_operator.nic.open.open_nics`, never from ``/sys`` directly:

- :mod:`.sysfs` reads the kernel's sysfs layout (PCI functions, their netdevs, RDMA devices and char
  devices, SR-IOV links) under a root directory, and asks the RDMA core its namespace mode over netlink;
- :mod:`.simulated` writes that same layout for a simulated node, so the simulator's agents read a
  tree like a real node's through the same reader;
- :mod:`.null` is the machine without NICs (``NIC_BACKEND=null``).
"""
