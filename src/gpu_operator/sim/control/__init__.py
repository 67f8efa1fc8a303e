"""The simulator process: the Simulator that owns every node, its control socket (``server``) and
the faults it can inject.
"""
