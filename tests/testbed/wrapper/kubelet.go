//go:build !testbed_v1_27

package main

import (
	"context"

	"github.com/spf13/cobra"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// newKubelet is cmd/kubelet's command; its constructor takes a context since 1.28.
func newKubelet() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) }
