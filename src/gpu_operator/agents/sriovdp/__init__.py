"""The SR-IOV network device plugin as an agent (``gpu-operator agent sriov-dp``): upstream's config,
discovery and Allocate response over the NIC backend, served by ``agents.shared.netplugin``."""
