"""The DCGM-compatible metrics exporter: ``gpu-operator agent exporter``.

Pure parts: ``counters`` (the DCGM fields this exporter can serve, how each is read from a backend
reading, and dcgm-exporter's counter CSV selecting them) and ``render`` (Prometheus text exposition
with dcgm-exporter's labels). ``pods`` maps devices to the pods holding them (PodResources ``List``,
once per collection); ``webconfig`` and ``agents.shared.httpserver`` are the endpoint (TLS and basic
auth in the exporter-toolkit format, a small asyncio HTTP/1.1 server serving pre-rendered bodies, shared
with the node status exporter); ``collector`` reads the backend once per interval and ``program`` wires it all
to the agent context.
"""
