"""Node agents (device plugin, feature discovery, exporter, validator, driver manager, toolkit, MIG manager).

Each agent is a subpackage with an ``async def main(ctx)`` program (``runtime.AgentContext``); they
depend on gpu and kubelet, never on the simulator. Feature discovery reuses the device plugin's
config file and node-config selection, as upstream ships both in one image.
"""
