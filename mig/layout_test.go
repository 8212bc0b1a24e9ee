package mig

import (
	"errors"
	"testing"
)

func TestLayoutCounts(t *testing.T) {
	a100 := mustLookup(t, "A100-40GB")
	h100 := mustLookup(t, "H100-80GB")
	a30 := mustLookup(t, "A30-24GB")
	tests := []struct {
		name         string
		p            *Product
		profiles     []string
		want, wantMx int
	}{
		{"classic A100", a100, []string{"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}, 297, 19},
		{"six 7-slice A100", a100, []string{"1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}, 722, 78},
		{"six 7-slice H100", h100, []string{"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}, 722, 78},
		{"with one +me H100", h100, nil, 2318, -1},
		{"A30", a30, []string{"1g.6gb", "2g.12gb", "4g.24gb"}, 25, -1},
	}
	for _, tt := range tests {
		ls, err := tt.p.Layouts(tt.profiles...)
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) != tt.want {
			t.Errorf("%s: %d layouts, want %d", tt.name, len(ls), tt.want)
		}
		mx := 0
		for _, l := range ls {
			if err := tt.p.Validate(l); err != nil {
				t.Errorf("%s: enumerated layout %s invalid: %v", tt.name, l, err)
			}
			if ok, _ := tt.p.IsMaximal(l, tt.profiles...); ok {
				mx++
			}
		}
		if tt.wantMx >= 0 && mx != tt.wantMx {
			t.Errorf("%s: %d maximal layouts, want %d", tt.name, mx, tt.wantMx)
		}
	}
}

func TestValidate(t *testing.T) {
	h := mustLookup(t, "H100-80GB")
	tests := []struct {
		layout  string
		wantErr error
	}{
		{"4g.40gb@0,3g.40gb@4", nil},
		{"7g.80gb@0", nil},
		{"1g.10gb@0,1g.10gb@1,1g.10gb@2,1g.10gb@3,1g.10gb@4,1g.10gb@5,1g.10gb@6", nil},
		{"1g.10gb+me@3,1g.20gb@6", nil},
		{"3g.40gb@2", ErrPlacement},
		{"1g.10gb@7", ErrPlacement},
		{"4g.40gb@0,2g.20gb@2", ErrOverlap},
		{"7g.80gb@0,1g.10gb@6", ErrOverlap},
		{"1g.10gb+me@0,1g.10gb+me@1", ErrMaxCount},
		{"5g.50gb@0", ErrUnknownProfile},
	}
	for _, tt := range tests {
		l, err := ParseLayout(tt.layout)
		if err != nil {
			t.Fatal(err)
		}
		err = h.Validate(l)
		if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
			t.Errorf("Validate(%s) = %v, want %v", tt.layout, err, tt.wantErr)
		}
	}
	// A30: two different +me profiles exceed the one-+me rule.
	a30 := mustLookup(t, "A30-24GB")
	if err := a30.Validate(Layout{{Profile: "1g.6gb+me", Start: 0}, {Profile: "2g.12gb+me", Start: 2}}); !errors.Is(err, ErrMediaExtensions) {
		t.Errorf("A30 two +me: %v, want ErrMediaExtensions", err)
	}
}

func TestParseLayoutRoundTrip(t *testing.T) {
	for _, s := range []string{"-", "4g.40gb@0*,3g.40gb@4", "1g.10gb+me@3,1g.20gb@6*"} {
		l, err := ParseLayout(s)
		if err != nil {
			t.Fatalf("ParseLayout(%q): %v", s, err)
		}
		if got := l.String(); got != s {
			t.Errorf("round trip %q -> %q", s, got)
		}
	}
	for _, s := range []string{"4g.40gb", "4g.40gb@x", "4g@0", "4g.40gb@-1"} {
		if _, err := ParseLayout(s); err == nil {
			t.Errorf("ParseLayout(%q) succeeded, want error", s)
		}
	}
}

func TestPicture(t *testing.T) {
	h := mustLookup(t, "H100-80GB")
	l, _ := ParseLayout("4g.40gb@0*,1g.10gb@5,1g.20gb@6")
	got := h.Picture("gpu-0", l)
	want := "gpu-0        |4g.40gb*                           |........|1g.10gb |1g.20gb          |"
	if got != want {
		t.Errorf("Picture:\n got %q\nwant %q", got, want)
	}
}
