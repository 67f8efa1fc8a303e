"""Generated modules of ``podresources.proto`` (proto package ``v1``)."""
