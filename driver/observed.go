package driver

import (
	"context"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/device"
)

// observeWait bounds how long the first publish waits for the slice
// watch (observeSlices) to have listed the slices it replaces.
const observeWait = 10 * time.Second

// slicesSelector selects the ResourceSlices of this driver on this node.
func (d *Runtime) slicesSelector() string {
	return fields.AndSelectors(
		fields.OneTermEqualSelector("spec.driver", d.name),
		fields.OneTermEqualSelector("spec.nodeName", d.o.nodeName),
	).String()
}

// observeSlices watches the node's ResourceSlices of this driver until
// ctx ends and tells the publication set what they list (Set.Observe):
// the scheduler allocates from them, and they are not only this
// process's. During a rolling update both instances publish, and the
// kubelet sends its calls to the newer one, which must prepare what the
// scheduler allocated from the older one's slices; after a restart the
// slices are the previous process's until the first publish replaces
// them. It returns the running informer, whose store Published reads
// back too.
func (d *Runtime) observeSlices(ctx context.Context) cache.SharedIndexInformer {
	slicesAPI := d.client.ResourceV1().ResourceSlices()
	selector := d.slicesSelector()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return slicesAPI.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return slicesAPI.Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &resourceapi.ResourceSlice{}, 0, cache.Indexers{})
	update := func() {
		d.published.Observe(devicesOfSlices(inf.GetStore().List()))
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { update() },
		UpdateFunc: func(any, any) { update() },
		DeleteFunc: func(any) { update() },
	}); err != nil {
		// Only an informer that was stopped refuses a handler.
		klog.FromContext(ctx).Error(err, "Watching the node's ResourceSlices")
	}
	go inf.RunWithContext(ctx)
	return inf
}

// listedNow reads the node's slices of this driver from the API server
// (one LIST) and says whether they list the device; what they list counts
// as published from now (Set.Saw). It is the prepare check's last resort
// for a device the set lacks, when the watch lags an allocation the
// scheduler made from slices another instance wrote a moment ago.
func (d *Runtime) listedNow(ctx context.Context, pool, dev string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := d.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: d.slicesSelector()})
	if err != nil {
		klog.FromContext(ctx).V(3).Info("Reading the node's ResourceSlices for an unpublished device", "pool", pool, "device", dev, "err", err)
		return false
	}
	objs := make([]any, len(list.Items))
	for i := range list.Items {
		objs[i] = &list.Items[i]
	}
	d.published.Saw(devicesOfSlices(objs))
	return d.published.Has(pool, dev)
}

// devicesOfSlices is the set of devices that slices list.
func devicesOfSlices(slices []any) map[device.DeviceID]bool {
	out := map[device.DeviceID]bool{}
	for _, o := range slices {
		s, ok := o.(*resourceapi.ResourceSlice)
		if !ok {
			continue
		}
		for _, dev := range s.Spec.Devices {
			out[device.DeviceID{Pool: s.Spec.Pool.Name, Device: dev.Name}] = true
		}
	}
	return out
}
