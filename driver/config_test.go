package driver_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/drakit/drakit/driver"
)

type gpuConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Mode       string `json:"mode,omitempty"`
	Level      int    `json:"level,omitempty"`
}

type nicConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	MTU        int    `json:"mtu"`
}

func testScheme(t *testing.T) *driver.ConfigScheme {
	t.Helper()
	s, err := driver.NewConfigScheme("gpu.example.com",
		driver.NewConfigType("gpu.example.com/v1", "GpuConfig", func(c *gpuConfig) error {
			if c.Mode != "" && c.Mode != "fast" && c.Mode != "slow" {
				return fmt.Errorf("mode %q: want fast or slow", c.Mode)
			}
			return nil
		}),
		driver.NewConfigType[nicConfig]("gpu.example.com/v1", "NicConfig", nil))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConfigSchemeDecode(t *testing.T) {
	s := testScheme(t)
	claim := func(p string) driver.OpaqueConfig { return driver.OpaqueConfig{Parameters: json.RawMessage(p)} }
	class := func(p string) driver.OpaqueConfig {
		return driver.OpaqueConfig{FromClass: true, Parameters: json.RawMessage(p)}
	}
	for _, tc := range []struct {
		name    string
		configs []driver.OpaqueConfig
		want    any
		wantErr string
	}{
		{name: "none"},
		{name: "one", configs: []driver.OpaqueConfig{claim(`{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","mode":"fast"}`)},
			want: &gpuConfig{APIVersion: "gpu.example.com/v1", Kind: "GpuConfig", Mode: "fast"}},
		{name: "claim overrides class field by field", configs: []driver.OpaqueConfig{
			class(`{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","mode":"slow","level":3}`),
			claim(`{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","mode":"fast"}`)},
			want: &gpuConfig{APIVersion: "gpu.example.com/v1", Kind: "GpuConfig", Mode: "fast", Level: 3}},
		{name: "another kind replaces", configs: []driver.OpaqueConfig{
			class(`{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","level":3}`),
			claim(`{"apiVersion":"gpu.example.com/v1","kind":"NicConfig","mtu":9000}`)},
			want: &nicConfig{APIVersion: "gpu.example.com/v1", Kind: "NicConfig", MTU: 9000}},
		{name: "unknown field", configs: []driver.OpaqueConfig{claim(`{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","mdoe":"fast"}`)},
			wantErr: `invalid opaque device configuration: request "gpu": GpuConfig (gpu.example.com/v1) from the claim: json: unknown field "mdoe"`},
		{name: "bad value", configs: []driver.OpaqueConfig{claim(`{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","mode":"warp"}`)},
			wantErr: `invalid opaque device configuration: request "gpu": GpuConfig (gpu.example.com/v1): mode "warp": want fast or slow`},
		{name: "bad value from the class", configs: []driver.OpaqueConfig{
			class(`{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","mode":"warp"}`),
			claim(`{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","level":1}`)},
			wantErr: `invalid opaque device configuration: request "gpu": GpuConfig (gpu.example.com/v1): mode "warp": want fast or slow`},
		{name: "the claim's value fixes the class's", configs: []driver.OpaqueConfig{
			class(`{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","mode":"warp"}`),
			claim(`{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","mode":"slow"}`)},
			want: &gpuConfig{APIVersion: "gpu.example.com/v1", Kind: "GpuConfig", Mode: "slow"}},
		{name: "unknown kind", configs: []driver.OpaqueConfig{class(`{"apiVersion":"gpu.example.com/v2","kind":"GpuConfig"}`)},
			wantErr: `invalid opaque device configuration: request "gpu": config from the class: apiVersion "gpu.example.com/v2", kind "GpuConfig": not a configuration of driver gpu.example.com, which takes gpu.example.com/v1 GpuConfig, gpu.example.com/v1 NicConfig`},
		{name: "not an object", configs: []driver.OpaqueConfig{claim(`[1]`)},
			wantErr: `invalid opaque device configuration: request "gpu": config from the claim: json: cannot unmarshal array into Go value of type struct { APIVersion string "json:\"apiVersion\""; Kind string "json:\"kind\"" }`},
		{name: "wrong value type", configs: []driver.OpaqueConfig{claim(`{"apiVersion":"gpu.example.com/v1","kind":"NicConfig","mtu":"big"}`)},
			wantErr: `invalid opaque device configuration: request "gpu": NicConfig (gpu.example.com/v1) from the claim: json: cannot unmarshal string into Go struct field nicConfig.mtu of type int`},
		{name: "two values", configs: []driver.OpaqueConfig{claim(`{"apiVersion":"gpu.example.com/v1","kind":"NicConfig"} {}`)},
			wantErr: `invalid opaque device configuration: request "gpu": config from the claim: invalid character '{' after top-level value`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Decode(driver.AllocatedDevice{Request: "gpu", Pool: "p", Device: "d", Config: tc.configs})
			if tc.wantErr != "" {
				var ce *driver.ConfigError
				if err == nil || err.Error() != tc.wantErr || !errors.Is(err, driver.ErrInvalidConfig) || !errors.As(err, &ce) {
					t.Fatalf("error\n%v\nwant a ConfigError wrapping ErrInvalidConfig:\n%s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("decoded (-want +got):\n%s", d)
			}
		})
	}
}

func TestDecodeAs(t *testing.T) {
	s := testScheme(t)
	dev := driver.AllocatedDevice{Request: "nic", Config: []driver.OpaqueConfig{{Parameters: json.RawMessage(`{"apiVersion":"gpu.example.com/v1","kind":"NicConfig","mtu":1500}`)}}}
	if c, err := driver.DecodeAs[nicConfig](s, dev); err != nil || c.MTU != 1500 {
		t.Errorf("DecodeAs[nicConfig] = %+v, %v", c, err)
	}
	if c, err := driver.DecodeAs[gpuConfig](s, dev); !errors.Is(err, driver.ErrInvalidConfig) {
		t.Errorf("DecodeAs[gpuConfig] of a NicConfig = %+v, %v; want ErrInvalidConfig", c, err)
	}
	if c, err := driver.DecodeAs[gpuConfig](s, driver.AllocatedDevice{Request: "gpu"}); c != nil || err != nil {
		t.Errorf("DecodeAs without configs = %+v, %v; want nil, nil", c, err)
	}
}

func TestUntypedConfigScheme(t *testing.T) {
	type label struct {
		Label string `json:"label"`
	}
	s, err := driver.NewConfigScheme("minimal.example.com", driver.NewConfigType[label]("", "", nil))
	if err != nil {
		t.Fatal(err)
	}
	dev := driver.AllocatedDevice{Request: "r", Config: []driver.OpaqueConfig{{Parameters: json.RawMessage(`{"label":"blue"}`)}}}
	if c, err := driver.DecodeAs[label](s, dev); err != nil || c.Label != "blue" {
		t.Errorf("decode = %+v, %v", c, err)
	}
	dev.Config[0].Parameters = json.RawMessage(`{"lable":"blue"}`)
	want := `invalid opaque device configuration: request "r": config from the claim: json: unknown field "lable"`
	if _, err := s.Decode(dev); err == nil || err.Error() != want {
		t.Errorf("decode = %v, want %s", err, want)
	}
}

func TestNewConfigSchemeRefuses(t *testing.T) {
	type noTypeMeta struct {
		Mode string `json:"mode"`
	}
	typed := driver.NewConfigType[gpuConfig]("g/v1", "A", nil)
	for name, types := range map[string][]driver.ConfigType{
		"no types":             nil,
		"zero ConfigType":      {{}},
		"kind without version": {driver.NewConfigType[gpuConfig]("", "A", nil)},
		"twice":                {typed, typed},
		"untyped beside typed": {typed, driver.NewConfigType[noTypeMeta]("", "", nil)},
		"no apiVersion field":  {driver.NewConfigType[noTypeMeta]("g/v1", "B", nil)},
	} {
		if _, err := driver.NewConfigScheme("g.example.com", types...); !errors.Is(err, driver.ErrBadConfigScheme) {
			t.Errorf("%s: %v, want ErrBadConfigScheme", name, err)
		}
	}
	if _, err := driver.NewConfigScheme("", typed); !errors.Is(err, driver.ErrBadConfigScheme) {
		t.Errorf("empty driver name: %v, want ErrBadConfigScheme", err)
	}
}

func ExampleConfigScheme() {
	type GpuConfig struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Interval   string `json:"interval,omitempty"`
	}
	scheme, err := driver.NewConfigScheme("gpu.example.com",
		driver.NewConfigType("gpu.example.com/v1", "GpuConfig", func(c *GpuConfig) error {
			if c.Interval != "" && c.Interval != "Short" && c.Interval != "Long" {
				return fmt.Errorf("interval %q: want Short or Long", c.Interval)
			}
			return nil
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	// In PrepareDevice: the configs that apply to the device, merged.
	dev := driver.AllocatedDevice{Request: "gpu", Config: []driver.OpaqueConfig{
		{Parameters: json.RawMessage(`{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","interval":"Long"}`)},
	}}
	cfg, err := driver.DecodeAs[GpuConfig](scheme, dev)
	fmt.Println(cfg.Interval, err)

	dev.Config[0].Parameters = json.RawMessage(`{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","interval":"Huge"}`)
	_, err = driver.DecodeAs[GpuConfig](scheme, dev)
	fmt.Println(err)
	// Output:
	// Long <nil>
	// invalid opaque device configuration: request "gpu": GpuConfig (gpu.example.com/v1): interval "Huge": want Short or Long
}
