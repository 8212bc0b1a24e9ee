// Package conformance checks any DRA driver by playing the kubelet and the
// scheduler against it and a real API server.
package conformance
