package cdi

import (
	"os"
	"slices"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Edits are changes a container runtime makes to a container that gets a
// device: environment variables, device nodes, mounts, hooks. Build them
// with the chainable methods; nothing is checked until [Writer.Write],
// which reports every problem. The zero value is empty and ready to use.
//
// A container gets the edits of every device of its claims, applied one
// device after the other, and an environment variable set again replaces
// the earlier value (the CDI library keeps one entry per name). So give
// each device of a claim its own variable names (a suffix from the
// device's name: GPU_DEV_0=..., GPU_DEV_1=...), and set a variable that
// concerns the claim as a whole (a list of all its devices) once, in
// [Claim].Common, with one value; the conformance check prepare.cdi-env
// fails a driver whose devices overwrite each other's variables.
type Edits struct {
	e cdispec.ContainerEdits
}

// Env adds the environment variable key=value. key must be non-empty and
// must not contain '='. Within a claim, key must be unique to this
// device unless every device sets it to the same value (see [Edits]).
func (e *Edits) Env(key, value string) *Edits {
	e.e.Env = append(e.e.Env, key+"="+value)
	return e
}

// DeviceNode is a device node to create in the container.
//
// Set Type, Major and Minor whenever the driver knows them (from a stat of
// the node or /proc/devices at prepare). When Type is empty, or Major is
// zero for a "c" or "b" node, the CDI library stats HostPath while it
// injects the spec, and injection fails on every host without that file:
// test hosts, fake nodes, a conformance run of a simulated device. A
// driver with no real node to give leaves DeviceNode out (an environment
// variable or a mount is enough to tell the container its device).
type DeviceNode struct {
	// Path is the node's path in the container; absolute, required.
	Path string
	// HostPath is the node on the host; empty means Path.
	HostPath string
	// Type is "c" (character), "b" (block) or "p" (FIFO). Empty makes the
	// runtime stat HostPath at injection (see above).
	Type string
	// Major and Minor are the device numbers. A zero Major for "c" or "b"
	// makes the runtime stat HostPath at injection (see above).
	Major, Minor int64
	// Permissions is a subset of "rwm"; empty means "rwm".
	Permissions string
	// FileMode, UID and GID of the node in the container; nil means the
	// host's.
	FileMode *os.FileMode
	UID, GID *uint32
}

// DeviceNode adds a device node.
func (e *Edits) DeviceNode(n DeviceNode) *Edits {
	dn := &cdispec.DeviceNode{
		Path: n.Path, HostPath: n.HostPath, Type: n.Type, Major: n.Major, Minor: n.Minor,
		Permissions: n.Permissions,
	}
	if n.FileMode != nil {
		m := *n.FileMode
		dn.FileMode = &m
	}
	if n.UID != nil {
		v := *n.UID
		dn.UID = &v
	}
	if n.GID != nil {
		v := *n.GID
		dn.GID = &v
	}
	e.e.DeviceNodes = append(e.e.DeviceNodes, dn)
	return e
}

// Mount adds a bind mount of hostPath at containerPath (both absolute)
// with the given mount options ("ro", "nosuid", ...); no options means
// ["bind"] as a bind mount needs.
func (e *Edits) Mount(hostPath, containerPath string, options ...string) *Edits {
	if len(options) == 0 {
		options = []string{"bind"}
	}
	e.e.Mounts = append(e.e.Mounts, &cdispec.Mount{
		HostPath: hostPath, ContainerPath: containerPath, Options: slices.Clone(options),
	})
	return e
}

// HookName is an OCI hook stage.
type HookName string

// The OCI hook stages a CDI spec may use.
const (
	Prestart        HookName = "prestart"
	CreateRuntime   HookName = "createRuntime"
	CreateContainer HookName = "createContainer"
	StartContainer  HookName = "startContainer"
	Poststart       HookName = "poststart"
	Poststop        HookName = "poststop"
)

// Hook adds an OCI hook: the runtime runs path (absolute) with args
// (args[0] is the program name, as in execve) at the given stage.
func (e *Edits) Hook(stage HookName, path string, args ...string) *Edits {
	e.e.Hooks = append(e.e.Hooks, &cdispec.Hook{HookName: string(stage), Path: path, Args: slices.Clone(args)})
	return e
}

// AdditionalGIDs adds supplementary group IDs to the container's process.
func (e *Edits) AdditionalGIDs(gids ...uint32) *Edits {
	e.e.AdditionalGIDs = append(e.e.AdditionalGIDs, gids...)
	return e
}

// EnvNames returns the names of the environment variables e sets, in
// the order they were added; nil for nil or no variable.
func (e *Edits) EnvNames() []string {
	if e == nil {
		return nil
	}
	var out []string
	for _, kv := range e.e.Env {
		k, _, _ := strings.Cut(kv, "=")
		out = append(out, k)
	}
	return out
}

// IsEmpty reports whether no edit was added.
func (e *Edits) IsEmpty() bool {
	return e == nil || (len(e.e.Env) == 0 && len(e.e.DeviceNodes) == 0 && len(e.e.Mounts) == 0 &&
		len(e.e.Hooks) == 0 && len(e.e.AdditionalGIDs) == 0)
}

// Append adds all edits of o after those of e.
func (e *Edits) Append(o *Edits) *Edits {
	if o == nil {
		return e
	}
	c := o.spec()
	e.e.Env = append(e.e.Env, c.Env...)
	e.e.DeviceNodes = append(e.e.DeviceNodes, c.DeviceNodes...)
	e.e.Mounts = append(e.e.Mounts, c.Mounts...)
	e.e.Hooks = append(e.e.Hooks, c.Hooks...)
	e.e.AdditionalGIDs = append(e.e.AdditionalGIDs, c.AdditionalGIDs...)
	return e
}

// spec returns a deep copy as the CDI spec type.
func (e *Edits) spec() cdispec.ContainerEdits {
	if e == nil {
		return cdispec.ContainerEdits{}
	}
	out := cdispec.ContainerEdits{
		Env:            slices.Clone(e.e.Env),
		AdditionalGIDs: slices.Clone(e.e.AdditionalGIDs),
	}
	for _, n := range e.e.DeviceNodes {
		c := *n
		if n.FileMode != nil {
			m := *n.FileMode
			c.FileMode = &m
		}
		if n.UID != nil {
			v := *n.UID
			c.UID = &v
		}
		if n.GID != nil {
			v := *n.GID
			c.GID = &v
		}
		out.DeviceNodes = append(out.DeviceNodes, &c)
	}
	for _, m := range e.e.Mounts {
		c := *m
		c.Options = slices.Clone(m.Options)
		out.Mounts = append(out.Mounts, &c)
	}
	for _, h := range e.e.Hooks {
		c := *h
		c.Args = slices.Clone(h.Args)
		c.Env = slices.Clone(h.Env)
		out.Hooks = append(out.Hooks, &c)
	}
	return out
}
