//go:build tools

// Package internal pins the modules drakit's packages build on, so that
// go.mod stays stable while packages are written. Remove once all are used.
package internal

import (
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/opencontainers/runtime-spec/specs-go"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "google.golang.org/grpc"
	_ "k8s.io/dynamic-resource-allocation/cel"
	_ "k8s.io/dynamic-resource-allocation/deviceattribute"
	_ "k8s.io/dynamic-resource-allocation/kubeletplugin"
	_ "k8s.io/dynamic-resource-allocation/resourceclaim"
	_ "k8s.io/dynamic-resource-allocation/resourceslice"
	_ "k8s.io/dynamic-resource-allocation/structured"
	_ "k8s.io/klog/v2"
	_ "k8s.io/kubelet/pkg/apis/dra/v1"
	_ "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	_ "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	_ "sigs.k8s.io/yaml"
	_ "tags.cncf.io/container-device-interface/pkg/cdi"
	_ "tags.cncf.io/container-device-interface/pkg/parser"
	_ "tags.cncf.io/container-device-interface/specs-go"
)
