package engine_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	partition "github.com/drakit/drakit/internal/engine" // the tests predate the move
)

// The test schemes. None of them is NVIDIA's: package mig's tests cover
// MIG through the same package.

// instinctLike is a scheme shaped like an AMD Instinct MI300X: 8 compute
// dies (XCDs) and 8 HBM stacks, 192 GiB; a compute partition mode
// (SPX, DPX, QPX, CPX: 1, 2, 4 or 8 partitions) set for the whole card,
// independently of a memory partition mode (NPS1: memory interleaved over
// every stack and shared; NPS4: each quarter local to its two dies). The
// combinations offered are those documented for MI300X: every compute
// mode with NPS1, and CPX with NPS4. Each profile is one combination and
// its mode, so a card holds partitions of one combination only. Under
// NPS4 a CPX partition owns its die's HBM stack (half of its quarter);
// under NPS1 partitions take no memory units. The names are the
// vendor's: devices "xcp-<card>-<profile>-<start>", counters "xcd-<i>",
// "hbm-<i>", "mode-<i>".
func instinctLike(t testing.TB) *partition.Scheme {
	t.Helper()
	const gib = int64(1) << 30
	starts := func(n, size int, memory bool) []partition.Placement {
		var out []partition.Placement
		for i := 0; i < n; i++ {
			pl := partition.Placement{Start: i, Compute: i * size}
			if memory {
				pl.Memory = i * size
			}
			out = append(out, pl)
		}
		return out
	}
	s, err := partition.NewScheme(partition.Scheme{
		Name:    "instinct-like-192g",
		Compute: partition.Units{Count: 8, Placed: true},
		Memory:  partition.Units{Count: 8, Placed: true},
		Profiles: []partition.Profile{
			{Name: "SPX/NPS1", ID: 1, Compute: 8, MemoryBytes: 192 * gib, MaxCount: 1, Placements: starts(1, 8, false), Mode: "SPX/NPS1"},
			{Name: "DPX/NPS1", ID: 2, Compute: 4, MemoryBytes: 96 * gib, MaxCount: 2, Placements: starts(2, 4, false), Mode: "DPX/NPS1"},
			{Name: "QPX/NPS1", ID: 4, Compute: 2, MemoryBytes: 48 * gib, MaxCount: 4, Placements: starts(4, 2, false), Mode: "QPX/NPS1"},
			{Name: "CPX/NPS1", ID: 8, Compute: 1, MemoryBytes: 24 * gib, MaxCount: 8, Placements: starts(8, 1, false), Mode: "CPX/NPS1"},
			{Name: "CPX/NPS4", ID: 84, Compute: 1, Memory: 1, MemoryBytes: 24 * gib, MaxCount: 8, Placements: starts(8, 1, true), Mode: "CPX/NPS4"},
		},
		Names: partition.Names{
			Card: "accelerator", Partition: "partition", MemoryUnit: "HBM stack", ComputeUnit: "XCD",
			Device: "xcp", MemoryCounter: "hbm-", ComputeCounter: "xcd-",
			CardType: "accelerator", PartitionType: "xcp",
			ModelAttribute: "productName", MemoryStartAttribute: "hbmStart", MemorySizeAttribute: "hbmStacks",
			ComputeStartAttribute: "xcdStart", ComputeSizeAttribute: "xcds",
			ComputeCapacity: "xcds",
		},
		Canonical: strings.ToUpper,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tiles is a scheme whose compute placement differs from its memory
// placement: 4 compute tiles and 4 memory banks, both placed. A quarter
// sits on tile t with bank t+1 (mod 4), a half on tiles 0-1 with banks
// 2-3 or the other way round; a "wide" profile takes two tiles and one
// bank, the tiles at 0 or 2 and the bank anywhere (eight placements of
// independent compute and memory); the whole card takes all. One video
// codec (an extra) goes to the "quarter+codec" partition.
func tiles(t testing.TB) *partition.Scheme {
	t.Helper()
	const gib = int64(1) << 30
	var quarter, wide []partition.Placement
	for i := 0; i < 4; i++ {
		quarter = append(quarter, partition.Placement{Start: i, Compute: i, Memory: (i + 1) % 4})
	}
	for c := 0; c < 4; c += 2 {
		for b := 0; b < 4; b++ {
			wide = append(wide, partition.Placement{Start: c*4 + b, Compute: c, Memory: b})
		}
	}
	s, err := partition.NewScheme(partition.Scheme{
		Name:    "tile-4",
		Compute: partition.Units{Count: 4, Placed: true},
		Memory:  partition.Units{Count: 4, Placed: true},
		Extras:  []partition.Extra{{Name: "codec", Capacity: 1}},
		Profiles: []partition.Profile{
			{Name: "whole", ID: 9, Compute: 4, Memory: 4, MemoryBytes: 64 * gib, MaxCount: 1, Placements: []partition.Placement{{}}},
			{Name: "half", ID: 2, Compute: 2, Memory: 2, MemoryBytes: 32 * gib, MaxCount: 2, Placements: []partition.Placement{{Start: 0, Compute: 0, Memory: 2}, {Start: 2, Compute: 2, Memory: 0}}},
			{Name: "wide", ID: 3, Compute: 2, Memory: 1, MemoryBytes: 16 * gib, MaxCount: 2, Placements: wide},
			{Name: "quarter", ID: 1, Compute: 1, Memory: 1, MemoryBytes: 16 * gib, MaxCount: 4, Placements: quarter},
			{Name: "quarter+codec", ID: 5, Compute: 1, Memory: 1, MemoryBytes: 16 * gib, MaxCount: 4, Placements: quarter,
				Extras: map[string]int{"codec": 1}, Capacities: map[string]resource.Quantity{"codecs": resource.MustParse("1")}},
		},
		Names: partition.Names{
			Card: "accelerator", MemoryUnit: "bank", ComputeUnit: "tile",
			Device: "acc", CounterSet: "res", MemoryCounter: "bank-", ComputeCounter: "tile-",
			CardType: "accelerator", PartitionType: "slice",
			TypeAttribute: "kind", IndexAttribute: "accelerator", ProfileAttribute: "shape", ProfileIDAttribute: partition.Omit,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// cores is a scheme with compute placed and memory counted: 6 cores on
// which partitions sit, 12 memory units they take by count wherever they
// sit, at most 4 partitions per card. The names are the defaults but for
// the device's.
func cores(t testing.TB) *partition.Scheme {
	t.Helper()
	at := func(size int) []partition.Placement {
		var out []partition.Placement
		for c := 0; c+size <= 6; c += size {
			out = append(out, partition.Placement{Start: c, Compute: c})
		}
		return out
	}
	s, err := partition.NewScheme(partition.Scheme{
		Name:          "core-6",
		Compute:       partition.Units{Count: 6, Placed: true},
		Memory:        partition.Units{Count: 12},
		MaxPartitions: 4,
		Profiles: []partition.Profile{
			{Name: "c1", ID: 1, Compute: 1, Memory: 2, MaxCount: 6, Placements: at(1)},
			{Name: "c2", ID: 2, Compute: 2, Memory: 5, MaxCount: 3, Placements: at(2)},
			{Name: "c3", ID: 3, Compute: 3, Memory: 6, MaxCount: 2, Placements: at(3)},
		},
		Names: partition.Names{Device: "vpu"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
