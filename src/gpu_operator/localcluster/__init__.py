"""The embedded local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
started on 127.0.0.1 for tests and the demo.

Modules: ``binaries`` (finding or building the executables), ``pki`` and ``kubeconfig`` (credentials),
``layout`` (the data directory and ports), ``components`` (each process's flags), ``process`` (child
processes that die with their parent), ``health`` (probes), ``cluster`` (:class:`LocalCluster`),
``fakenode`` (Ready nodes without a kubelet), ``waiting`` (polling with deadlines), ``tools`` (kubectl and
helm), ``state`` and ``supervisor`` (the ``gpu-operator cluster`` command's background cluster).
"""
