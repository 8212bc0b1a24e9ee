package driver

import (
	"errors"
	"fmt"
)

// ClaimError is the error of one claim's prepare or unprepare: the one
// the runtime answers the kubelet with, and logs. Its Reason is one of the
// Reason* constants, the reason label of drakit_driver_errors_total. Get
// it from an error with errors.As:
//
//	var ce *driver.ClaimError
//	if errors.As(err, &ce) && ce.Reason() == driver.ReasonGuard { ... }
//
// A [Preparer] may return one made by [NewClaimError] to count its
// failure under another reason than [ReasonVendor].
type ClaimError struct {
	reason string
	err    error
}

// NewClaimError returns err with a reason, one of the Reason* constants
// (another string is kept as it is, as a metric label). A nil err gives a
// nil error.
func NewClaimError(reason string, err error) error {
	if err == nil {
		return nil
	}
	return &ClaimError{reason: reason, err: err}
}

// Reason says why the claim failed: one of the Reason* constants.
func (e *ClaimError) Reason() string { return e.reason }

// Error is the message, without the reason.
func (e *ClaimError) Error() string { return e.err.Error() }

// Unwrap returns the error the reason was given to.
func (e *ClaimError) Unwrap() error { return e.err }

// failed makes a ClaimError from a format.
func failed(reason string, format string, args ...any) error {
	return &ClaimError{reason: reason, err: fmt.Errorf(format, args...)}
}

// reasonOf is the reason of err: the outermost ClaimError's, else
// [ReasonVendor].
func reasonOf(err error) string {
	var ce *ClaimError
	if errors.As(err, &ce) {
		return ce.reason
	}
	return ReasonVendor
}

// reasonFor is the reason of an error a vendor hook returned: its own
// ClaimError's, [ReasonConfig] for bad opaque configuration, else
// [ReasonVendor].
func reasonFor(err error) string {
	var ce *ClaimError
	switch {
	case errors.As(err, &ce):
		return ce.reason
	case errors.Is(err, ErrInvalidConfig):
		return ReasonConfig
	}
	return ReasonVendor
}

// ErrRunAgain is [Runtime.Run]'s error for a Runtime whose Run was called
// before: a Runtime runs once; build another with [New] to run again.
var ErrRunAgain = errors.New("run driver: Run was called before on this Runtime")
