// Package conformance checks any DRA driver by playing the kubelet and the
// scheduler against it and a real API server, the way csi-sanity does for
// CSI drivers. It speaks only the protocols, so it works for drivers not
// built with drakit:
//
//   - as the kubelet: pluginregistration GetInfo and
//     NotifyRegistrationStatus on the registration socket, the DRA node
//     service (dra/v1, or v1beta1 when that is all the driver offers; a
//     second advertised version is checked against the first) and the
//     health stream (dra-health v1 or v1alpha1), over unix-socket gRPC;
//   - as the scheduler: it allocates claims with the real
//     k8s.io/dynamic-resource-allocation/structured allocator against the
//     driver's published ResourceSlices and writes allocation and
//     reservation to the API server with UpdateStatus. The reservation
//     names the suite (not a pod), which the resource claim controller
//     leaves alone; no kubelet and no scheduler are needed.
//
// CDI IDs are resolved and injected into an OCI spec with the real CDI
// library (tags.cncf.io/container-device-interface).
//
// # Use
//
// From a vendor's own tests, on a cluster that package testenv starts
// (a control plane and a fake node; the suite plays the node's kubelet):
//
//	func TestConformance(t *testing.T) {
//		env := testenv.Start(t)
//		cfg := env.ConformanceConfig("gpu.example.com") // client, node, folders
//		cfg.StartCommand = append([]string{"./my-driver"}, env.DriverArgs("gpu.example.com")...)
//		conformance.Test(t, cfg)
//	}
//
// On an existing cluster, Config.Client is any cluster-admin clientset
// and the folders are the node's (/var/lib/kubelet/plugins_registry,
// /var/run/cdi).
//
// or "drakit conformance" from the command line, which runs [Run] and
// writes the summary, JUnit XML and JSON.
//
// # Checks
//
// Every check has an ID, a one-line description, the rule it enforces and a
// level: MUST where the kubelet or the API breaks without it, SHOULD where
// it is the kubeletplugin contract's advice. A SHOULD check never fails a
// run (it warns). [Checks] lists them all, in run order; categories are
// registration, slices, allocation, prepare, unprepare, restart (only with
// Config.StartCommand: kill -9 and restart), health (only when the driver
// advertises a health service and does not answer Unimplemented) and
// robust.
//
// # Proof that it has teeth
//
// The test driver in internal/testdriver is built directly on
// k8s.io/dynamic-resource-allocation/kubeletplugin. Correct, it passes
// every check. Started
// with -defect NAME it has one defect, and the suite's tests assert that
// the named check catches it (fail for MUST, warn for SHOULD):
//
//	defect                   what is wrong                                        caught by
//	forget-on-restart        prepared claims kept in memory only                  restart.unprepare
//	non-idempotent           new CDI device name on every prepare                 prepare.idempotent
//	wrong-request-names      names a request the device was not allocated for     prepare.request-names
//	missing-request-names    returns no request names                             prepare.request-names
//	cdi-unresolvable         CDI ID that no spec defines                          prepare.cdi-resolve
//	bad-cdi-id               CDI ID not of the form vendor/class=name             prepare.cdi-ids-format
//	bad-attributes           pciBusID as int, numaNode as string                  slices.standard-attributes
//	unprepare-unknown-fails  error when unpreparing an unknown claim              unprepare.unknown-claim
//	crash-on-empty           crashes on a prepare request with no claims          robust.empty-request
//	no-guard                 hands a device in use to a second claim              prepare.device-in-use (SHOULD)
//	leak-cdi                 leaves the claim's CDI spec behind                   unprepare.cleanup
//	wrong-device             returns a device name that was not allocated         prepare.devices-match
//	skip-claim               answers only the first claim of a request            prepare.result-per-claim
//	admin-guard              refuses admin-access claims on devices in use        allocation.admin-access
//	other-driver             prepares other drivers' allocation results           robust.other-driver
//	broken-counters          device consumes more than its counter set holds      slices.counters
//	health-unknown-device    health report names an unpublished device            health.initial-report
//	health-stale             health sent once, never refreshed                    health.refresh (SHOULD)
//	health-silent            health stream open, no initial report                health.coverage (SHOULD)
//	drop-share-id            leaves out the share ID of a shared device           allocation.shared
//
// A second correct variant with one plain device and no health service
// shows that checks needing more (counters, shared devices, concurrency,
// health) skip instead of failing.
//
// # Run time
//
// Measured on a 2-core machine against the test driver and a local
// control plane: a full run takes 8 to 11 s (about 1 s waiting for the
// first ResourceSlices, 1 to 3 s for kill -9 and restart, 1 s collecting
// the initial health reports plus up to the devices' health check timeout
// for health.refresh, 2 s of liveness probes in the robustness checks);
// "drakit conformance" including the start and stop of a local control
// plane takes about 22 s. A driver with the kubelet's default health
// timeout (30 s) makes health.refresh wait up to 35 s (Config.HealthWait).
//
// # Limits
//
// The suite cannot tell a prepare that did real work from one that did
// not: it checks what the protocol shows (answers, CDI specs, files in the
// CDI folders). Files a driver keeps outside the CDI folders are not
// checked for cleanup, and files another program writes into the CDI
// folders while a claim is prepared would be blamed on the driver.
// Errors for bad claims are accepted either as a whole-call gRPC error
// (what kubeletplugin does) or as a per-claim error. A driver whose devices need binding conditions is
// allocated but not prepared device by device.
package conformance
