"""Names and rules every layer shares, spelled once: label and annotation keys, resource names, the
JSON alias, label selectors and accessors of API objects (conditions, Ready, the controlling owner).

Pure: no I/O, no other package of ours; everything may import it.
"""
