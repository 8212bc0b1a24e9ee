package driver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/drakit/drakit/cdi"
	. "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/internal/checkpoint"
)

// envOnly is a preparer that hands out one environment variable, as
// examples/minimal does.
type envOnly struct{}

func (envOnly) PrepareDevice(_ context.Context, _ Claim, dev AllocatedDevice) (PreparedDevice, error) {
	return PreparedDevice{Edits: (&cdi.Edits{}).Env("BENCH_DEVICE", dev.Device)}, nil
}

func (envOnly) UnprepareDevice(context.Context, ClaimRef, AllocatedDevice, json.RawMessage) error {
	return nil
}

// BenchmarkPrepareUnprepare runs the engine's durable prepare+unprepare
// cycle (checkpoint records and CDI spec on the real file system, no
// gRPC, no API server) from 8 goroutines per CPU, each on its own claim.
// Its CPU profile is where the runtime's own cost per cycle goes:
//
//	go test ./driver -run '^$' -bench PrepareUnprepare -cpuprofile cpu.out
func BenchmarkPrepareUnprepare(b *testing.B) {
	eng, ctx := benchEngine(b)
	var seq atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := seq.Add(1)
		claim := testClaim(fmt.Sprintf("bench-%d", id), alloc{request: "req", device: fmt.Sprintf("dev-%d", id)})
		ref := ClaimRef{UID: claim.UID, Namespace: claim.Namespace, Name: claim.Name}
		for pb.Next() {
			if res := eng.Prepare(ctx, claim); res.Err != nil {
				b.Fatal(res.Err)
			}
			if err := eng.Unprepare(ctx, ref); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkPrepareHeld runs one claim's prepare+unprepare with 0 and
// with 256 other claims held prepared: the cost must not grow with the
// claims held (compare the two in one run).
func BenchmarkPrepareHeld(b *testing.B) {
	for _, held := range []int{0, 256} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			eng, ctx := benchEngine(b)
			for i := range held {
				c := testClaim(fmt.Sprintf("held-%d", i), alloc{request: "req", device: fmt.Sprintf("held-%d", i)})
				if res := eng.Prepare(ctx, c); res.Err != nil {
					b.Fatal(res.Err)
				}
			}
			claim := testClaim("measured", alloc{request: "req", device: "dev-0"})
			ref := ClaimRef{UID: claim.UID, Namespace: claim.Namespace, Name: claim.Name}
			b.ResetTimer()
			for b.Loop() {
				if res := eng.Prepare(ctx, claim); res.Err != nil {
					b.Fatal(res.Err)
				}
				if err := eng.Unprepare(ctx, ref); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchEngine is a recovered engine on fresh folders of b, with the
// runtime's production options (CDI specs without fsync) and a preparer
// that only sets an environment variable.
func benchEngine(b *testing.B) (*TestEngine, context.Context) {
	b.Helper()
	dir := b.TempDir()
	store, err := checkpoint.Open(filepath.Join(dir, "checkpoint"))
	if err != nil {
		b.Fatal(err)
	}
	specs, err := cdi.NewWriter(filepath.Join(dir, "cdi"), testDriver, CDIClass, cdi.WithoutFsync())
	if err != nil {
		b.Fatal(err)
	}
	eng := NewTestEngine(testDriver, store, specs, envOnly{})
	ctx := context.Background()
	if err := eng.Recover(ctx); err != nil {
		b.Fatal(err)
	}
	return eng, ctx
}
