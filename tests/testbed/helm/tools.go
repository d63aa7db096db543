//go:build tools

// Package tools pins the Helm CLI the test bed builds (tests/testbed/build): the chart in
// charts/initguard is linted, rendered and installed with it. Never part of the product.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
