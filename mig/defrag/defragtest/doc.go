// Package defragtest builds the scenes of tests of the MIG defragmenter
// (mig/defrag) on a cluster: claim templates that ask for one MIG
// profile, pods and one-replica Deployments that use them (opted in to
// being moved or not), PodDisruptionBudgets, and what a test reads back
// to judge the controller: where each app's pod is placed, the
// controller's Events and the tainted devices. It serves a cluster with
// a fake node (nothing runs, a pod counts once bound) and one with a real
// node (a pod counts once it runs) alike.
package defragtest
