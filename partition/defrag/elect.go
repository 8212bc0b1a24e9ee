package defrag

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Lease timings of the leader election, those of kube-controller-manager.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

// errLostLease ends Run when another replica took the lease.
var errLostLease = errors.New("defrag controller: lost the leader lease")

// runElected steps only while this replica holds the lease. It returns
// nil when ctx ends, errLostLease when the lease is lost while ctx lives.
func (c *Controller) runElected(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	host, _ := os.Hostname()
	id := host + "_" + string(uuid.NewUUID())
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.o.leaseNamespace, Name: c.o.leaseName},
		Client:     c.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	var lost bool
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            c.o.leaseName,
		LeaseDuration:   leaseDuration,
		RenewDeadline:   renewDeadline,
		RetryPeriod:     retryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				logger.Info("Leading: defragmenting", "lease", c.o.leaseNamespace+"/"+c.o.leaseName, "identity", id)
				// A new leader reads the guards' memory from the cluster
				// again: the previous leader may have evicted since.
				c.mem = memory{abandoned: c.mem.abandoned}
				_ = c.loop(ctx)
			},
			OnStoppedLeading: func() {
				lost = ctx.Err() == nil
				logger.Info("Not leading any more", "lease", c.o.leaseNamespace+"/"+c.o.leaseName, "identity", id)
			},
			OnNewLeader: func(leader string) {
				if leader != id {
					logger.Info("Another replica leads", "leader", leader)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("defrag controller: leader election: %w", err)
	}
	le.Run(ctx)
	if lost {
		return errLostLease
	}
	return nil
}
