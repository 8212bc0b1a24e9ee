// Package faults is the partition lifecycle's test seam: the steps at
// which a test binary kills a driver process, and the tool calls it makes
// fail, as a lost card fails them. Only test binaries set [Hook] (the
// lifecycle's own tests and the child processes of package lifecycletest);
// in every other program it is nil and each step costs one comparison.
package faults

import "context"

// Hook, when not nil, is called at each step of the lifecycle with the
// card the step works on: "tool/create", "tool/destroy", "tool/list" and
// "tool/switch" right before a tool call (an error it returns is taken
// for the tool's, and the tool is not called), "tool/created",
// "tool/destroyed", "tool/switched" and "tool/listed" right after one,
// and the lifecycle's own steps ("prepare/held", "release/undone", ...)
// after each durable write. Set it before the first Manager is opened and
// leave it: it is read without synchronization.
var Hook func(ctx context.Context, point, card string) error

// At calls Hook, if set.
func At(ctx context.Context, point, card string) error {
	if Hook == nil {
		return nil
	}
	return Hook(ctx, point, card)
}
