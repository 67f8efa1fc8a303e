//go:build tools

// Package tools records the Kubernetes commands this module builds, so `go mod tidy` keeps them
// (the kubelet is built by hack/build-node.sh for the real nodes, the rest by hack/build-kube.sh).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
