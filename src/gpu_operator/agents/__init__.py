"""Node agents (device plugin, feature discovery, exporter, validator, driver manager, toolkit, MIG manager).

Each agent is a subpackage with an ``async def main(ctx)`` program (``runtime.AgentContext``); they
depend on gpu and kubelet, never on the simulator. No agent package imports another (an import-linter
independence contract): what several share (the device plugin's config file, read by feature discovery
and MPS too; operand pausing; the validator's status files; the metrics HTTP server; ...) lives in
``shared``. ``programs`` (the registry), ``runtime`` and ``host`` may be imported by all.
"""
