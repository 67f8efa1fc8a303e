"""The container toolkit agent: runtime configuration for NVIDIA GPUs, the runtime wrappers and CDI specs.

Pure parts: ``containerd``, ``k3s``, ``crio`` and ``docker`` compute the edited text of a runtime's
config (round-trip: everything we do not own stays byte-for-byte; ``tomledit`` is the TOML helper,
``docker`` carries its own JSON splicer), ``agents.shared.cdi`` builds the CDI spec of a node's GPUs and
MIG devices (and finds the driver files it mounts; the device plugin uses it too), ``cdischema`` is the
CDI spec's JSON schema, ``settings`` reads the environment. Side effects live in
``agents.shared.files`` (atomic writes with a backup), ``configure`` (which files
change, the undo record, and signalling or restarting the runtime), ``install`` (the wrapper
executables and hook), ``ocimodify`` (the stand-alone helper the wrapper runs on the host) and
``program`` (the agent loop).
"""
