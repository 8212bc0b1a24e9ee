package nvml_test

import (
	"testing"

	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
)

// memSim is a simulated server whose state lives in memory.
func memSim(t testing.TB, server string, opts ...nvmlsim.Option) *nvmlsim.Sim {
	t.Helper()
	s, err := nvmlsim.Open("", append([]nvmlsim.Option{nvmlsim.WithServer(server)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
