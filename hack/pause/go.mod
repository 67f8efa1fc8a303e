// The pause (infra) container of every pod on the local cluster's real nodes (see hack/build-node.sh).
// No dependencies: only the standard library.
module gpu-operator.local/pause

go 1.26.0
