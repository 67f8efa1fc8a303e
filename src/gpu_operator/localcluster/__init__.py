"""The embedded local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
started on 127.0.0.1 for tests and the demo.
"""
