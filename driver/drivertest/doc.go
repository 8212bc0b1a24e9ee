// Package drivertest plays the kubelet's side of a DRA driver for tests and
// benchmarks: it dials a driver's registration and DRA sockets with real
// gRPC, calls NodePrepareResources and NodeUnprepareResources as the
// kubelet does, and creates allocated ResourceClaims in a real API server
// (the kubelet plugin helper reads each claim before it prepares it). It
// works with any DRA driver, built with drakit or not.
package drivertest
