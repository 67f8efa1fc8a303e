"""The node status exporter: the validator chain's results as Prometheus metrics (``:8000/metrics``)."""
