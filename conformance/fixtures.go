package conformance

import (
	"context"
	"errors"
	"fmt"
)

// A fixture is a situation that checks need: the driver registered, its
// slices published, the main claims prepared, ... The runner sets each up
// once, on the first check that needs it, after the fixtures it needs in
// turn; one check (its judge) reports how setting it up went, and every
// other check that needs it skips when it could not be set up. So each
// check runs on its own ("go test -run TestConformance/prepare.idempotent"
// sets up what that check needs and nothing else), and skipping one check
// changes no other check's outcome.
type fixture int

const (
	fxRegistration   fixture = iota // the registration socket answers GetInfo
	fxEndpoint                      // the endpoint from GetInfo is dialed
	fxNode                          // registration confirmed: the node service is usable
	fxSlices                        // complete ResourceSlices are published
	fxEveryDevice                   // every device allocated (and prepared) one by one
	fxMain                          // the main claims are allocated and prepared
	fxMainUnprepared                // the main claims are unprepared again
	fxShared                        // claims share a device and were prepared, unprepared
	fxHealth                        // the health stream is open, first reports read
	fxRestart                       // the driver was killed and restarted with claims prepared
	numFixtures
)

// fixtureInfo says what a fixture is, which check judges it and what it
// needs; runner.setup sets it up.
type fixtureInfo struct {
	name  string
	judge string
	needs []fixture
}

var fixtureTable = [numFixtures]fixtureInfo{
	fxRegistration:   {"the registration socket", "registration.socket", nil},
	fxEndpoint:       {"a connection to the node service", "registration.endpoint", []fixture{fxRegistration}},
	fxNode:           {"a registered driver", "registration.notify", []fixture{fxEndpoint}},
	fxSlices:         {"published ResourceSlices", "slices.published", nil},
	fxEveryDevice:    {"every device allocated one by one", "allocation.every-device", []fixture{fxSlices}},
	fxMain:           {"the main claims prepared", "prepare.result-per-claim", []fixture{fxNode, fxSlices}},
	fxMainUnprepared: {"the main claims unprepared", "unprepare.result-per-claim", []fixture{fxMain}},
	fxShared:         {"claims prepared on one shared device", "allocation.shared", []fixture{fxNode, fxSlices}},
	fxHealth:         {"the first health reports", "health.initial-report", []fixture{fxNode, fxSlices}},
	fxRestart:        {"a restart with claims prepared", "restart.reregister", []fixture{fxNode, fxSlices}},
}

// setup sets up one fixture whose needs are met.
func (r *runner) setup(ctx context.Context, fx fixture) error {
	switch fx {
	case fxRegistration:
		return r.setupRegistration(ctx)
	case fxEndpoint:
		return r.setupEndpoint(ctx)
	case fxNode:
		return r.setupNode(ctx)
	case fxSlices:
		return r.setupSlices(ctx)
	case fxEveryDevice:
		return r.setupEveryDevice(ctx)
	case fxMain:
		return r.setupMain(ctx)
	case fxMainUnprepared:
		return r.setupMainUnprepared(ctx)
	case fxShared:
		return r.setupShared(ctx)
	case fxHealth:
		return r.setupHealth(ctx)
	case fxRestart:
		return r.setupRestart(ctx)
	}
	return fmt.Errorf("unknown fixture %d", fx)
}

// setupError says why a fixture could not be set up.
type setupError struct {
	// failed: the driver did something wrong (its judge fails);
	// otherwise the suite could not set the situation up (its judge
	// skips).
	failed bool
	msg    string
}

func (e *setupError) Error() string { return e.msg }

// broken is a setup error that the driver caused.
func broken(format string, args ...any) error {
	return &setupError{failed: true, msg: fmt.Sprintf(format, args...)}
}

// unable is a setup error where the suite could not set the situation up.
func unable(format string, args ...any) error {
	return &setupError{msg: fmt.Sprintf(format, args...)}
}

type fixtureState struct {
	done bool
	err  error
}

// need sets up fx (and what it needs) unless that was done before, and
// returns why it could not be set up.
func (r *runner) need(ctx context.Context, fx fixture) error {
	st := &r.fixtures[fx]
	if st.done {
		return st.err
	}
	info := fixtureTable[fx]
	for _, dep := range info.needs {
		if err := r.need(ctx, dep); err != nil {
			st.done, st.err = true, unable("needs %s (see %s): %s", fixtureTable[dep].name, fixtureTable[dep].judge, firstLine(err.Error()))
			return st.err
		}
	}
	err := r.setup(ctx, fx)
	var se *setupError
	if err != nil && !errors.As(err, &se) {
		err = broken("%v", err)
	}
	st.done, st.err = true, err
	return err
}

// judge returns the outcome of fx's judge check when fx could not be set
// up (fail when the driver caused it, skip otherwise), nil when it was.
func (r *runner) judge(ctx context.Context, fx fixture) *outcome {
	err := r.need(ctx, fx)
	if err == nil {
		return nil
	}
	var se *setupError
	if errors.As(err, &se) && !se.failed {
		o := skip("%s", se.msg)
		return &o
	}
	o := fail("%s", err.Error())
	return &o
}

// needsSkip returns the outcome of a check whose fixtures could not all
// be set up, or nil.
func (r *runner) needsSkip(ctx context.Context, needs []fixture) *outcome {
	for _, fx := range needs {
		if err := r.need(ctx, fx); err != nil {
			o := skip("needs %s (see %s): %s", fixtureTable[fx].name, fixtureTable[fx].judge, firstLine(err.Error()))
			return &o
		}
	}
	return nil
}
