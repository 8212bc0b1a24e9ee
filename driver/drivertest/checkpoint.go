package drivertest

import (
	"errors"
	"fmt"
	"sort"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/drakit/drakit/driver/internal/checkpoint"
)

// CheckpointWriteCost measures the drakit runtime's durable checkpoint
// write (one claim record: temporary file, fsync, rename, fsync of the
// folder) in dir with held other records present, and returns the median
// of writes writes. dir should be empty; it is filled with held records.
func CheckpointWriteCost(dir string, held, writes int) (time.Duration, error) {
	if held < 0 || writes < 1 {
		return 0, errors.New("checkpoint write cost: held must be >= 0 and writes >= 1")
	}
	s, err := checkpoint.Open(dir)
	if err != nil {
		return 0, err
	}
	rec := func(uid string) *checkpoint.Record {
		return &checkpoint.Record{ClaimUID: types.UID(uid), Namespace: "bench", Name: uid, State: checkpoint.StatePrepared,
			Devices: []checkpoint.Device{{Request: "req-0", Pool: "node", Device: "dev-0", Prepared: true, CDIDeviceIDs: []string{"bench.drakit.dev/claim=" + uid + "_0-dev-0"}}}}
	}
	for i := range held {
		if err := s.WriteIntent(rec(fmt.Sprintf("held-%06d", i))); err != nil {
			return 0, err
		}
	}
	// Flush the filled records first, so that the measured writes do not
	// pay for their writeback.
	syscall.Sync()
	r := rec("measured")
	d := make([]time.Duration, 0, writes)
	for range writes {
		t0 := time.Now()
		if err := s.Write(r); err != nil {
			return 0, err
		}
		d = append(d, time.Since(t0))
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2], nil
}
