"""Generated protobuf and gRPC modules of the kubelet APIs (device plugin v1beta1, PodResources v1).

The ``.proto`` files beside them are the sources; ``hack/gen-proto.sh`` regenerates the ``_pb2`` modules and
``tests/golden/test_proto_drift.py`` fails when the committed ones differ from a fresh generation.
"""
