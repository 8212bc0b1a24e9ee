// Package engine is the implementation behind package partition and its
// sub-packages partition/counter and partition/plan: the scheme's tables,
// the layout state, the planner with its exact searches, the
// defragmenter, the fleet assignment and the counter model. It is one
// package because all of them work on the scheme's internal tables;
// the public packages give each concern its own API and option type.
//
// LayoutPublisher, the single-process sequencer with a time fence that
// package partition/ledger replaced, lives only here: the benchmarks
// (mig/bench) and the ledger's adversarial tests keep it as the design
// it replaced.
package engine
