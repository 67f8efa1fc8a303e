//go:build tools

// Pins NVIDIA's gpu-operator (v25.3.4) for the peer benchmark (see hack/build-nvidia-operator.sh).
package tools

import _ "github.com/NVIDIA/gpu-operator/cmd/gpu-operator"
