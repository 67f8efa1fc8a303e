"""What more than one node agent needs, so that no agent imports another (an import-linter contract).

- ``pluginconfig``: the device plugin's config file v1 and settings (device plugin, GFD, MPS);
  ``nodeconfig``: which named config this node uses (its ``nvidia.com/device-plugin.config`` label);
- ``resources``: the resources the device plugin advertises (MIG strategies, sharing), from which the
  MPS agent also learns which resources need a daemon; ``mpsready``: the MPS daemon's ready marker;
- ``cdi``: CDI specs of a node's GPUs and the driver files they mount (toolkit, device plugin);
  ``files``: atomic host file writes with a backup;
- ``cluster``: the node's view of the cluster API; ``operands``: pausing and restoring operands
  through their deploy labels (driver manager, MIG manager);
- ``validations``: the validator's status files (validator, node status exporter);
  ``allocatable``: the GPUs allocatable on this node; ``podresources``: where the kubelet's
  PodResources socket is (validator, node status exporter, exporter);
- ``httpserver``: the small HTTP server of the metrics endpoints (exporter, node status exporter).

Modules here import ``agents.runtime`` and each other, never an agent package.
"""
