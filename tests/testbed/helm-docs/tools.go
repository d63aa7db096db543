//go:build tools

// Package tools pins the helm-docs CLI the test bed builds (tests/testbed/build): it generates
// charts/initguard/README.md's values table from values.yaml. Never part of the product.
package tools

import _ "github.com/norwoodj/helm-docs/cmd/helm-docs"
