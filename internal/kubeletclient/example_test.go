package kubeletclient_test

import (
	"fmt"

	"github.com/drakit/drakit/internal/kubeletclient"
)

// The kubelet takes the first node service version it knows of those a
// driver advertises in GetInfo.
func ExampleFirstKnown() {
	advertised := []string{"v1beta1.DRAPlugin", "v1.DRAPlugin", "v1.DRAResourceHealth"}
	fmt.Println(kubeletclient.FirstKnown(advertised, kubeletclient.NodeServices))
	fmt.Println(kubeletclient.FirstKnown(advertised, kubeletclient.HealthServices))
	// Output:
	// v1.DRAPlugin
	// v1.DRAResourceHealth
}
