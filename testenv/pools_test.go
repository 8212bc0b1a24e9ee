package testenv_test

import (
	"context"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drakit/drakit/testenv"
)

// TestWaitForPools: WaitForPools returns only once every slice of a
// pool is in the API server, says what is missing while one is not, and
// waits for a named pool that has no slice yet.
func TestWaitForPools(t *testing.T) {
	env := testenv.Start(t)
	ctx := t.Context()
	const driver = "pools.example.com"
	create := func(name, pool string, count int64, dev string) {
		t.Helper()
		node := env.NodeName
		_, err := env.Client.ResourceV1().ResourceSlices().Create(ctx, &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &node,
				Pool:    resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: count},
				Devices: []resourceapi.Device{{Name: dev}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, time.Second)
		t.Cleanup(cancel)
		return c
	}
	if _, err := env.WaitForPools(short(), driver); err == nil || !strings.Contains(err.Error(), "no ResourceSlice yet") {
		t.Errorf("no slices: %v, want an error saying there are none", err)
	}
	create("a-0", "a", 2, "dev-0")
	if _, err := env.WaitForPools(short(), driver); err == nil || !strings.Contains(err.Error(), `pool "a" generation 1 has 1 slices, resourceSliceCount says 2`) {
		t.Errorf("half a pool: %v, want an error naming the missing slice", err)
	}
	create("a-1", "a", 2, "dev-1")
	slices, err := env.WaitForPools(ctx, driver)
	if err != nil {
		t.Fatal(err)
	}
	if len(slices) != 2 || slices[0].Name != "a-0" || slices[1].Name != "a-1" {
		t.Errorf("got %d slices, want a-0 and a-1", len(slices))
	}
	if _, err := env.WaitForPools(short(), driver, "a", "b"); err == nil || !strings.Contains(err.Error(), `pool "b" has no ResourceSlice`) {
		t.Errorf("a named pool missing: %v, want an error naming it", err)
	}
	create("b-0", "b", 1, "dev-2")
	if slices, err := env.WaitForPools(ctx, driver, "b"); err != nil || len(slices) != 1 || slices[0].Name != "b-0" {
		t.Errorf("pool b: %d slices, %v; want b-0", len(slices), err)
	}
}
