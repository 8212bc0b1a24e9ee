package nvml

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestErrorsKeepTheCodeAndMatchTheirSentinel(t *testing.T) {
	for code, sentinel := range map[Return]error{
		ErrorInsufficientResources: ErrInsufficientResources,
		ErrorNotSupported:          ErrNotSupported,
		ErrorInUse:                 ErrInUse,
		ErrorNotFound:              ErrNotFound,
		ErrorInvalidArgument:       ErrInvalidArgument,
		ErrorNoPermission:          ErrNoPermission,
	} {
		err := fmt.Errorf("wrapped: %w", &Error{Op: "op", Code: code})
		if !errors.Is(err, sentinel) || CodeOf(err) != code {
			t.Errorf("%v: Is(%v) = false or CodeOf = %v", err, sentinel, CodeOf(err))
		}
		for other, s := range sentinelOf {
			if other != code && errors.Is(err, s) {
				t.Errorf("%v matches %v too", err, s)
			}
		}
	}
	if got := (&Error{
		Op: "create", Code: 23, Detail: "full",
	}).Error(); got != "create: ERROR_INSUFFICIENT_RESOURCES: full" {
		t.Errorf("message %q", got)
	}
	if got := Return(77).String(); got != "NVML_RETURN_77" {
		t.Errorf("unnamed code prints %q", got)
	}
	if CodeOf(nil) != Success || CodeOf(errors.New("x")) != ErrorUnknown {
		t.Error("CodeOf of nil or a plain error")
	}
}

// TestOpenRealWithoutLibraryGivesOneClearError: where libnvidia-ml cannot
// be loaded (here: a path that does not exist, so also on a GPU node),
// OpenReal fails with ErrLibraryNotFound and says how to use the
// simulator.
func TestOpenRealWithoutLibraryGivesOneClearError(t *testing.T) {
	r, err := OpenReal(WithLibraryPath("/nonexistent/libnvidia-ml.so.1"))
	if err == nil {
		r.Close()
		t.Fatal("OpenReal succeeded without a library")
	}
	if !errors.Is(err, ErrLibraryNotFound) || !strings.Contains(err.Error(), "-nvml-sim") {
		t.Fatalf("error %q does not wrap ErrLibraryNotFound or name the simulator flag", err)
	}
}

func TestPCIBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:1B:00.0": "0000:1b:00.0",
		"0000:07:00.0":     "0000:07:00.0",
	} {
		if got := PCIBusID(in); got != want {
			t.Errorf("PCIBusID(%q) = %q, want %q", in, got, want)
		}
	}
}
