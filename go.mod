module github.com/drakit/drakit

go 1.26.0

require (
	github.com/google/go-cmp v0.7.0 // indirect
	k8s.io/api v0.37.2 // indirect
	k8s.io/apimachinery v0.37.2 // indirect
	k8s.io/client-go v0.37.2 // indirect
	k8s.io/component-base v0.37.2 // indirect
	k8s.io/dynamic-resource-allocation v0.37.2 // indirect
	k8s.io/kubelet v0.37.2 // indirect
	tags.cncf.io/container-device-interface v1.1.2 // indirect
)
