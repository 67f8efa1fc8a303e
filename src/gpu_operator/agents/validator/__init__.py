"""The validator chain: ``gpu-operator agent validator`` with ``COMPONENT`` driver, toolkit, cuda or plugin.

Each component checks for real what it claims (``checks``, ``toolkit``, ``cuda``), writes its
upstream status file under ``/run/nvidia/validations`` of the node (``agents.shared.validations``,
read too by the node status exporter) and, with
``WITH_WAIT=true``, waits for its prerequisite, saying every 10 s what it waits for and why.
"""
