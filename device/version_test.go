package device_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/drakit/drakit/device"
)

func TestNormalizeVersion(t *testing.T) {
	for in, want := range map[string]string{
		"580.95.05": "580.95.5", "13.0": "13.0.0", "9": "9.0.0", "1.2.3-rc.1": "1.2.3-rc.1", "010.0.0+b.5": "10.0.0+b.5",
	} {
		if got, err := device.NormalizeVersion(in); err != nil || got != want {
			t.Errorf("NormalizeVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "1.2.3.4", "v1.2", "1..2", "1.x", "1.2-", "99999999999999999999"} {
		if got, err := device.NormalizeVersion(bad); !errors.Is(err, device.ErrNotAVersion) {
			t.Errorf("NormalizeVersion(%q) = %q, %v; want ErrNotAVersion", bad, got, err)
		}
	}
}

func ExampleNormalizeVersion() {
	v, _ := device.NormalizeVersion("580.95.05") // an NVIDIA driver version
	d := device.New("gpu-0").VersionAttribute("driverVersion", v)
	fmt.Println(v, d.Name())
	// Output: 580.95.5 gpu-0
}
