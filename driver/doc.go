// Package driver is the runtime that turns a vendor's discoverer and
// preparer into a correct DRA driver behind the kubelet plugin helper.
package driver
