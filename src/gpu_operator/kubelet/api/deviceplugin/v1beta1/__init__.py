"""Generated modules of ``deviceplugin.proto`` (proto package ``v1beta1``)."""
