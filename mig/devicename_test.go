package mig

import (
	"errors"
	"testing"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
)

// TestDeviceNamesOneReading checks that NVIDIA's device names have one
// reading: for every device of every catalog product's counter model
// (cards 0 and 12), mig.ParseDeviceName, which needs no product, says
// what the product's partition.Scheme.ParseDeviceName says, and
// DeviceRef.String gives the name back. A name of no device is refused
// by both.
func TestDeviceNamesOneReading(t *testing.T) {
	for _, p := range Products() {
		s := p.Scheme()
		m, err := counter.NewModel([]counter.Card{{Index: 0, Scheme: s}, {Index: 12, Scheme: s}})
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		for _, d := range m.Devices {
			want, err := s.ParseDeviceName(d.Name)
			if err != nil {
				t.Fatalf("%s: scheme parse %s: %v", p.Name, d.Name, err)
			}
			got, err := ParseDeviceName(d.Name)
			if err != nil {
				t.Fatalf("%s: mig parse %s: %v", p.Name, d.Name, err)
			}
			if got.GPU != want.Card || got.Profile != want.Profile || got.Start != want.Start {
				t.Errorf("%s: %s: mig reads %+v, the scheme %+v", p.Name, d.Name, got, want)
			}
			if got.String() != d.Name {
				t.Errorf("%s: %+v prints %s, want %s", p.Name, got, got.String(), d.Name)
			}
			if n, err := s.DeviceName(want.Card, want.Profile, want.Start); err != nil || n != d.Name {
				t.Errorf("%s: scheme names %+v %q (%v), want %s", p.Name, want, n, err, d.Name)
			}
		}
		for _, bad := range []string{"gpu", "gpu-x", "gpu-0-1g", "mig-0", "gpu-0-counters"} {
			if _, err := s.ParseDeviceName(bad); !errors.Is(err, partition.ErrDeviceName) {
				t.Errorf("%s: the scheme reads %q: %v", p.Name, bad, err)
			}
			if _, err := ParseDeviceName(bad); !errors.Is(err, ErrDeviceName) {
				t.Errorf("mig reads %q: %v", bad, err)
			}
		}
	}
}
