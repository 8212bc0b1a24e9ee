// Package fleet is the fleet's layout planner: one leader-elected
// component that decides where a card is partitioned for the pending
// demand, for any vendor's partition scheme, on top of the layout ledgers
// of package partition/ledger (docs/dynamic-mig-publication.md).
//
// It watches ResourceClaims, unscheduled pods, nodes and the ledgers once
// for the fleet, keeps for each pending request the nodes it can land on
// (the pod's node selector, required node affinity and tolerations; the
// cards' profiles), assigns the requests to nodes with
// plan.AssignFleet (a burst lands on as few nodes as it needs; aged
// requests first; a card reserved for a larger profile that fits nowhere
// yet), writes each node's Demand into its ledger, resolves the ledgers'
// Held entries from what the API server shows of their claims, and seeds
// new ledgers. A node's agent (ledger.Agent) watches only its own ledger.
//
// What the vendor gives: WithClassProfile (which partition profile a
// device of a DeviceClass is), WithExtendedResource (the same for
// extended resources) and WithSchemes (the schemes of the ledgers'
// cards). examples/nvidia runs it as `nvidia-dra-driver planner`.
package fleet
