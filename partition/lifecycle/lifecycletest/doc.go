// Package lifecycletest runs a vendor's dynamic-partition driver (one
// built on package partition/lifecycle) through the faults a node meets,
// with the real drakit runtime: its driver processes are the test binary
// run again, serving over gRPC on unix sockets, killed with SIGKILL at
// every step of the script, started again on lost state, beside a second
// process or a rolling update's other instance, with a card that stops
// answering, and under concurrent calls; the kubelet's side is
// driver/drivertest's, on claims allocated in a real API server
// (package testenv) from the devices the driver publishes.
//
// A vendor writes a [Config] (its driver's name, how to make fake
// hardware for a node, how its main opens the driver, and a script of
// the kubelet's calls) and two functions in a test file:
//
//	func TestMain(m *testing.M) {
//		lifecycletest.Child(kit()) // the kit's driver processes
//		os.Exit(m.Run())
//	}
//
//	func TestFaults(t *testing.T) { lifecycletest.Run(t, kit()) }
//
// [Run] says what each scenario does and checks. A check that fails
// names the partition, the claim and what the journal or the card holds;
// the driver's output is shown when it dies where it should not.
package lifecycletest
