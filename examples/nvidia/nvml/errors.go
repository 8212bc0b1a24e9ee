package nvml

import (
	"errors"
	"fmt"
)

// Return is an NVML return code (nvmlReturn_t). The values are NVML's, so
// a code from the real library and one from the simulator compare equal.
type Return int32

// NVML return codes a DRA driver branches on or reports. Codes not listed
// here still travel in an *Error with their numeric value.
const (
	Success                    Return = 0
	ErrorUninitialized         Return = 1
	ErrorInvalidArgument       Return = 2
	ErrorNotSupported          Return = 3
	ErrorNoPermission          Return = 4
	ErrorNotFound              Return = 6
	ErrorDriverNotLoaded       Return = 9
	ErrorTimeout               Return = 10
	ErrorLibraryNotFound       Return = 12
	ErrorFunctionNotFound      Return = 13
	ErrorGPUIsLost             Return = 15
	ErrorResetRequired         Return = 16
	ErrorInUse                 Return = 19
	ErrorInsufficientResources Return = 23
	ErrorUnknown               Return = 999
)

var returnNames = map[Return]string{
	Success:                    "SUCCESS",
	ErrorUninitialized:         "ERROR_UNINITIALIZED",
	ErrorInvalidArgument:       "ERROR_INVALID_ARGUMENT",
	ErrorNotSupported:          "ERROR_NOT_SUPPORTED",
	ErrorNoPermission:          "ERROR_NO_PERMISSION",
	ErrorNotFound:              "ERROR_NOT_FOUND",
	ErrorDriverNotLoaded:       "ERROR_DRIVER_NOT_LOADED",
	ErrorTimeout:               "ERROR_TIMEOUT",
	ErrorLibraryNotFound:       "ERROR_LIBRARY_NOT_FOUND",
	ErrorFunctionNotFound:      "ERROR_FUNCTION_NOT_FOUND",
	ErrorGPUIsLost:             "ERROR_GPU_IS_LOST",
	ErrorResetRequired:         "ERROR_RESET_REQUIRED",
	ErrorInUse:                 "ERROR_IN_USE",
	ErrorInsufficientResources: "ERROR_INSUFFICIENT_RESOURCES",
	ErrorUnknown:               "ERROR_UNKNOWN",
}

// String prints NVML's name of the code, e.g. "ERROR_IN_USE", or
// "NVML_RETURN_<n>" for a code this package does not name.
func (r Return) String() string {
	if s, ok := returnNames[r]; ok {
		return s
	}
	return fmt.Sprintf("NVML_RETURN_%d", int32(r))
}

// Sentinel errors for the return codes a caller branches on. Every *Error
// matches (errors.Is) the sentinel of its code; the sentinels are also
// usable on their own.
var (
	// ErrInsufficientResources: the GPU has no room for the instance
	// (overlapping placement, profile count, second "+me", compute slices).
	ErrInsufficientResources = errors.New("insufficient resources")
	// ErrNotSupported: the GPU cannot do this, e.g. MIG mode is off.
	ErrNotSupported = errors.New("not supported")
	// ErrInUse: the object is in use, e.g. a GPU instance that still has a
	// compute instance, or MIG mode changed while instances exist.
	ErrInUse = errors.New("in use")
	// ErrNotFound: no such GPU instance or compute instance.
	ErrNotFound = errors.New("not found")
	// ErrInvalidArgument: an unknown GPU, profile or placement.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNoPermission: the caller lacks the privilege (MIG management
	// needs root or CAP_SYS_ADMIN on the real GPU).
	ErrNoPermission = errors.New("no permission")
	// ErrLibraryNotFound: libnvidia-ml.so.1 could not be loaded.
	ErrLibraryNotFound = errors.New("NVML library not found")
	// ErrGPULost: the GPU is lost (NVML_ERROR_GPU_IS_LOST: fallen off
	// the bus, XID 79); it answers nothing until it is reset.
	ErrGPULost = errors.New("GPU is lost")
)

var sentinelOf = map[Return]error{
	ErrorInsufficientResources: ErrInsufficientResources,
	ErrorNotSupported:          ErrNotSupported,
	ErrorInUse:                 ErrInUse,
	ErrorNotFound:              ErrNotFound,
	ErrorInvalidArgument:       ErrInvalidArgument,
	ErrorNoPermission:          ErrNoPermission,
	ErrorLibraryNotFound:       ErrLibraryNotFound,
	ErrorGPUIsLost:             ErrGPULost,
}

// Error is a failed NVML call: the operation, the return code, and a
// detail. errors.Is(err, ErrInUse) and friends match on Code; errors.As
// gives the code itself.
type Error struct {
	// Op names the call, e.g. "create GPU instance 9 at 4:4 on GPU 0".
	Op string
	// Code is the NVML return code.
	Code Return
	// Detail explains the failure where the backend knows more than the
	// code says (the simulator names the conflicting instance).
	Detail string
}

// Error prints "<op>: <CODE>[: detail]".
func (e *Error) Error() string {
	s := e.Op + ": " + e.Code.String()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is reports whether target is the sentinel of e's code.
func (e *Error) Is(target error) bool {
	s, ok := sentinelOf[e.Code]
	return ok && s == target
}

// CodeOf returns the NVML return code carried by err, Success for nil, and
// ErrorUnknown for an error that carries none.
func CodeOf(err error) Return {
	if err == nil {
		return Success
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ErrorUnknown
}

// NewError returns the *Error of a failed call op with code, detail
// formatted with args when there are any. A backend other than the real
// library (the simulator, a wrapper) returns its failures with it, so
// that callers match them with the same sentinels.
func NewError(code Return, op string, detail string, args ...any) *Error {
	if len(args) > 0 {
		detail = fmt.Sprintf(detail, args...)
	}
	return &Error{Op: op, Code: code, Detail: detail}
}

// simulatorHint ends the error OpenReal returns when libnvidia-ml cannot
// be loaded.
const simulatorHint = "no NVIDIA driver on this machine? To run without a GPU, use the simulated " +
	"backend: " +
	"the -nvml-sim flag (e.g. -nvml-sim=dgx-h100, see nvmlflag.Flags) or nvmlsim.Open in Go"
