// Command testbed is one binary holding the real Kubernetes components that
// initguard's test bed runs: kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet and kubectl from one k8s.io/kubernetes version, plus etcd from
// go.etcd.io/etcd/server/v3 (the version k8s.io/kubernetes itself requires).
// One binary links the shared dependencies once, which saves build time and disk.
//
// It dispatches on the base name of argv[0] (symlinks named after the
// components) or, when called by its own name, on its first argument.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

var components = map[string]func() int{
	"kube-apiserver":          func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() int { return cli.Run(controllermanager.NewControllerManagerCommand()) },
	"kube-scheduler":          func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kubelet":                 func() int { return cli.Run(newKubelet()) },
	"kubectl": func() int {
		// As cmd/kubectl's main: print the error kubectl-style, exit 1.
		if err := cli.RunNoErrOutput(kubectlcmd.NewDefaultKubectlCommand()); err != nil {
			cmdutil.CheckErr(err)
		}
		return 0
	},
	"etcd": func() int { etcdmain.Main(os.Args); return 0 },
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := components[name]; !ok {
		if len(os.Args) < 2 {
			fmt.Fprintln(os.Stderr, "usage: testbed kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kubectl|etcd [args...]")
			os.Exit(2)
		}
		name = os.Args[1]
		// The components parse os.Args themselves: make it look like a direct call.
		os.Args = append([]string{name}, os.Args[2:]...)
	}
	run, ok := components[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "testbed: unknown component %q\n", name)
		os.Exit(2)
	}
	os.Exit(run())
}
