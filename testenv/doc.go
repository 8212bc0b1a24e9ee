// Package testenv runs a real Kubernetes 1.37 cluster for a driver's
// tests, from go test, in any module: what controller-runtime's envtest
// is for controllers, with the scheduler, the controller manager and a
// node to serve. The node is a fake one (a Node object with no kubelet:
// the scheduler allocates claims for it, [conformance.Test] plays its
// kubelet) or, with [WithRealNode], a real kubelet with containerd and
// runc that runs pods and applies the driver's CDI specs.
//
//	func TestConformance(t *testing.T) {
//		env := testenv.Start(t)
//		cfg := env.ConformanceConfig("gpu.example.com")
//		cfg.StartCommand = append([]string{driverBinary}, env.DriverArgs("gpu.example.com")...)
//		conformance.Test(t, cfg)
//	}
//
// A pod created before a driver's pools are complete can stay
// Unschedulable for minutes: [Env.WaitForPools] waits until they are
// (a driver built on package driver also says so itself:
// driver.Runtime.Published).
//
// Everything Start launches is stopped by PID when the test ends, also
// when it fails. With go test -short, Start skips the test.
//
// The components (etcd, kube-apiserver, kube-scheduler,
// kube-controller-manager, kubelet, containerd and two images) are built
// once into ~/.cache/drakit ($DRAKIT_CACHE) by
//
//	go run github.com/drakit/drakit/cmd/drakit setup
//
// run from the module that requires drakit (a drakit checkout's
// hack/setup.sh runs the same). When they are missing, Start fails the
// test with an error that names them and that command.
package testenv
