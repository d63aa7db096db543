//go:build testbed_v1_27

package main

import (
	"github.com/spf13/cobra"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// newKubelet is cmd/kubelet's command; 1.27's constructor takes no arguments.
func newKubelet() *cobra.Command { return kubelet.NewKubeletCommand() }
