package cluster

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortsAvoidTheEphemeralRange: the ports a cluster's components
// listen on come from below the kernel's ephemeral range, where no
// outgoing connection can take one before the component binds it; they
// are distinct and free.
func TestFreePortsAvoidTheEphemeralRange(t *testing.T) {
	lo, hi := portsBelowEphemeral()
	if lo == hi {
		t.Skip("this host's ephemeral port range leaves no room below it")
	}
	ports, err := freePorts(7)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < lo || p >= hi {
			t.Errorf("port %d is outside [%d, %d), in the ephemeral range or below the floor", p, lo, hi)
		}
		if seen[p] {
			t.Errorf("port %d chosen twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		_ = l.Close()
	}
}
