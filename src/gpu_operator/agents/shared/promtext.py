"""Prometheus text exposition (format 0.0.4) pieces the agents that serve metrics share.

Label values and help texts escaped as the format requires, and sample values written as
dcgm-exporter writes them (integers as integers, floating-point values with six decimals).
"""

from __future__ import annotations

import math


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float | int) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:f}"
