"""The OFED (DOCA) driver container as our agent (``ofed-driver``) and its safe-load init container
(``ofed-safe-load``)."""
