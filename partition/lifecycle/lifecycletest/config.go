package lifecycletest

import (
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/partition/lifecycle"
)

// Config is a vendor's dynamic-partition driver as the kit runs it.
type Config struct {
	// Driver is the driver's name.
	Driver string
	// Machine makes the fake hardware of a fresh node in the empty
	// folder dir (cards in the state they ship in) and returns the
	// test's view of it. It runs in the test's process; the driver's
	// processes find the machine through the folder.
	Machine func(dir string) (Machine, error)
	// Open returns the driver's discoverer and preparer on the node's
	// machine, with the partition lifecycle's state in n.State: what the
	// driver's main hands driver.New. It runs in each driver process the
	// kit starts. Pass n.Options to lifecycle.Open or lifecycle.NewNode
	// after the driver's own.
	Open func(n Node) (Driver, error)
	// Script is the kubelet's calls, in order: prepares and unprepares
	// of claims, each feasible on the devices the driver publishes at
	// that point (the kit allocates only published devices). Give it a
	// claim on each of two cards before the first unprepare (the lost
	// card and lost state scenarios use them), a card whole and a card
	// mode change if the hardware has them. It should release every
	// claim by its end; the kit releases those it does not.
	Script []Step
	// Skip names scenarios not to run (see [Run]).
	Skip []string
}

// Machine is the test's view of a node's fake hardware.
type Machine struct {
	// Cards are the dynamic cards' stable identities ([lifecycle.Key]).
	Cards []string
	// Tool is the vendor's tool on the machine: the kit lists the
	// cards' partitions with it, and never changes them.
	Tool lifecycle.Tool
	// Key names the partition of a device of the node by its name.
	Key func(device string) (lifecycle.Key, bool)
}

// MachineOf is the Machine of a binding ([lifecycle.Binding]), for a
// driver built on [lifecycle.NewNode].
func MachineOf(b lifecycle.Binding) Machine {
	m := Machine{Tool: b.Tool, Key: b.Key}
	for _, c := range b.Cards {
		m.Cards = append(m.Cards, c.ID)
	}
	return m
}

// Node is what a driver process of the kit runs on.
type Node struct {
	// Name is the node's name (a new one for each scenario).
	Name string
	// Machine is the folder Config.Machine made the hardware in.
	Machine string
	// State is the partition lifecycle's state folder.
	State string
	// Options are the kit's lifecycle options for this process (a
	// rolling update's [lifecycle.WithRollingUpdate]): pass them after
	// the driver's own.
	Options []lifecycle.Option
	// Owner is set when the process is an instance of a rolling update
	// (Options then hold lifecycle.WithRollingUpdate with it), for a
	// driver that takes a rolling update by an option of its own.
	Owner string
}

// Driver is a driver's discoverer and preparer, as its main hands them
// to driver.New (a [lifecycle.Node] is both).
type Driver interface {
	driver.Discoverer
	driver.Preparer
}

// Step is one call of the kubelet in a [Config.Script].
type Step struct {
	// Claim names the claim within the script.
	Claim string
	// Devices are the devices allocated to the claim, by name, for a
	// prepare; none for an unprepare.
	Devices []string
	// Config is the claim's opaque configuration for the driver (the
	// parameters' JSON), for every request; empty for none.
	Config string
}

// Prepare is the step that prepares claim with devices.
func Prepare(claim string, devices ...string) Step { return Step{Claim: claim, Devices: devices} }

// PrepareWith is the step that prepares claim with devices and the
// claim's opaque configuration config (JSON) for them.
func PrepareWith(claim, config string, devices ...string) Step {
	return Step{Claim: claim, Devices: devices, Config: config}
}

// Unprepare is the step that unprepares claim.
func Unprepare(claim string) Step { return Step{Claim: claim} }
