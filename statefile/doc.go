// Package statefile keeps a driver's state on disk safe from crashes and
// from a second process: [WriteFile] replaces a file so that a reader, or
// a process started after a crash, sees the old content or the new one,
// never a torn file; [Acquire] and [TryAcquire] take an advisory lock
// (flock) that the kernel releases when its holder dies, so a killed
// process never blocks the next one; [Document] joins the two into a
// JSON file that processes read and change in turn; [LockInstance] keeps
// a folder to one process, or to the two instances of a rolling update
// of one owner.
//
// The drakit runtime keeps its checkpoint, CDI specs and instance locks
// with it, and so can a vendor's driver for state of its own (the NVIDIA
// example's MIG journal and simulator state do).
package statefile
