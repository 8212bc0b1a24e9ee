package driver

import (
	"testing"
	"time"
)

// TestBackoff: retry delays double from retryInitial up to retryMax, and
// start over after a reset.
func TestBackoff(t *testing.T) {
	var b backoff
	var got []time.Duration
	for range 9 {
		got = append(got, b.delay())
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute, time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
	b.reset()
	if d := b.delay(); d != retryInitial {
		t.Errorf("delay after reset = %v, want %v", d, retryInitial)
	}
}
