package drivertest_test

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drakit/drakit/driver/drivertest"
)

func ExampleRef() {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gpu", UID: "1234"}}
	for _, c := range drivertest.Ref(claim) {
		fmt.Println(c.Namespace, c.Name, c.Uid)
	}
	// Output: default gpu 1234
}
