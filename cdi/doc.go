// Package cdi writes per-claim Container Device Interface specs: unique
// device names, container-edit builders, atomic writes, removal, garbage
// collection of orphans, and validation by injection into an OCI spec.
//
// A driver creates one [Writer] for its CDI folder, vendor and class. On
// NodePrepareResources it describes the claim's devices with [Edits]
// (environment, device nodes, mounts, hooks) and calls [Writer.Write],
// which returns the qualified CDI device IDs for the kubelet. On
// NodeUnprepareResources it calls [Writer.Remove]; at start-up and from
// time to time [Writer.GC] removes the specs of claims that are no longer
// prepared.
//
// Names are built only from validated parts. A spec file is
// "<vendor>+<class>+<claim UID>.json" and a device is
// "<claim UID>_<EncodeName(device)>": the claim UID is checked to hold
// letters, digits and '-' only, so no name can leave the folder, and
// since claim UIDs are never reused, neither are device names. A claim's
// namespace and name only go into an annotation.
//
// [Inject] does what a container runtime does with the IDs, using the CDI
// library itself, so tests can check the env, mounts and device nodes a
// container really gets.
package cdi
