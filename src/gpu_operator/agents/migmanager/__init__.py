"""The MIG manager: applies the node's ``nvidia.com/mig.config`` (a mig-parted config name) to its GPUs.

``config`` parses mig-parted config v1 and plans one named config per GPU; ``defaults`` is the default
config set; ``apply`` sets MIG mode (resetting GPUs) and geometry on the backend; ``clients`` reads the
GPU clients file and stops and starts host services; ``reconfigure`` is one reconfiguration (pause the
GPU clients, apply mode and geometry, restore, report); ``program`` watches the label.
"""
