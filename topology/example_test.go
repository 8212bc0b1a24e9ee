package topology_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drakit/drakit/topology"
)

// A claim for a GPU and a NIC on one PCIe root, rendered for kubectl.
func Example_alignedClaim() {
	spec, err := topology.ClaimSpec([]topology.Request{
		{Name: "gpu", DeviceClassName: "gpu.example.com"},
		{Name: "nic", DeviceClassName: "nic.example.com"},
	}, topology.SamePCIeRoot("gpu", "nic"))
	if err != nil {
		fmt.Println(err)
		return
	}
	out, _ := topology.YAML(topology.Claim("default", "gpu-nic", spec))
	fmt.Print(string(out))
	// Output:
	// apiVersion: resource.k8s.io/v1
	// kind: ResourceClaim
	// metadata:
	//   name: gpu-nic
	//   namespace: default
	// spec:
	//   devices:
	//     constraints:
	//     - matchAttribute: resource.kubernetes.io/pcieRoot
	//       requests:
	//       - gpu
	//       - nic
	//     requests:
	//     - exactly:
	//         allocationMode: ExactCount
	//         count: 1
	//         deviceClassName: gpu.example.com
	//       name: gpu
	//     - exactly:
	//         allocationMode: ExactCount
	//         count: 1
	//         deviceClassName: nic.example.com
	//       name: nic
}

// Standard labels for an EKS node, plus the NVLink domain a driver found.
func ExampleLabeler_Plan() {
	l, err := topology.NewLabeler(topology.WithFact(topology.LevelInterconnectDomain, "nvl-17"))
	if err != nil {
		fmt.Println(err)
		return
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ip-10-0-0-1", Labels: map[string]string{
		"topology.kubernetes.io/zone":           "us-east-1a",
		"topology.k8s.aws/network-node-layer-1": "nn-a",
		"topology.k8s.aws/network-node-layer-2": "nn-b",
		"topology.k8s.aws/network-node-layer-3": "nn-c",
	}}}
	plan := l.Plan(node)
	for _, c := range plan.Changes {
		fmt.Printf("%s %s=%s (from %s)\n", c.Op, c.Key, c.New, c.From)
	}
	// Output:
	// add topology.drakit.dev/superblock=nn-a (from topology.k8s.aws/network-node-layer-1)
	// add topology.drakit.dev/block=nn-b (from topology.k8s.aws/network-node-layer-2)
	// add topology.drakit.dev/rack=nn-c (from topology.k8s.aws/network-node-layer-3)
	// add topology.drakit.dev/interconnect-domain=nvl-17 (from fact)
}
