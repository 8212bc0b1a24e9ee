// Package partition: transitional aliases of the engine (replaced below).
package partition

import "github.com/drakit/drakit/internal/engine"

// AssignOption is engine.AssignOption.
type AssignOption = engine.AssignOption

// Assignment is engine.Assignment.
type Assignment = engine.Assignment

// Card is engine.Card.
type Card = engine.Card

// CardUse is engine.CardUse.
type CardUse = engine.CardUse

// CounterModel is engine.CounterModel.
type CounterModel = engine.CounterModel

// Defrag is engine.Defrag.
type Defrag = engine.Defrag

// Demand is engine.Demand.
type Demand = engine.Demand

// DeviceRef is engine.DeviceRef.
type DeviceRef = engine.DeviceRef

// Extra is engine.Extra.
type Extra = engine.Extra

// FleetAssignment is engine.FleetAssignment.
type FleetAssignment = engine.FleetAssignment

// FleetCard is engine.FleetCard.
type FleetCard = engine.FleetCard

// Instance is engine.Instance.
type Instance = engine.Instance

// Layout is engine.Layout.
type Layout = engine.Layout

// LayoutCard is engine.LayoutCard.
type LayoutCard = engine.LayoutCard

// LayoutPublisher is engine.LayoutPublisher.
type LayoutPublisher = engine.LayoutPublisher

// LayoutVersion is engine.LayoutVersion.
type LayoutVersion = engine.LayoutVersion

// Move is engine.Move.
type Move = engine.Move

// Names is engine.Names.
type Names = engine.Names

// Node is engine.Node.
type Node = engine.Node

// NodeCard is engine.NodeCard.
type NodeCard = engine.NodeCard

// OpKind is engine.OpKind.
type OpKind = engine.OpKind

// Operation is engine.Operation.
type Operation = engine.Operation

// Option is engine.Option.
type Option = engine.Option

// PendingRequest is engine.PendingRequest.
type PendingRequest = engine.PendingRequest

// Placement is engine.Placement.
type Placement = engine.Placement

// Plan is engine.Plan.
type Plan = engine.Plan

// Profile is engine.Profile.
type Profile = engine.Profile

// Request is engine.Request.
type Request = engine.Request

// ReservedCard is engine.ReservedCard.
type ReservedCard = engine.ReservedCard

// Scheme is engine.Scheme.
type Scheme = engine.Scheme

// Search is engine.Search.
type Search = engine.Search

// Units is engine.Units.
type Units = engine.Units

// Unplaced is engine.Unplaced.
type Unplaced = engine.Unplaced

// Value is engine.Value.
type Value = engine.Value

// AssignFleet is engine.AssignFleet.
var AssignFleet = engine.AssignFleet

// DefaultMix is engine.DefaultMix.
var DefaultMix = engine.DefaultMix

// DefaultProfiles is engine.DefaultProfiles.
var DefaultProfiles = engine.DefaultProfiles

// Defragment is engine.Defragment.
var Defragment = engine.Defragment

// LayoutCardPools is engine.LayoutCardPools.
var LayoutCardPools = engine.LayoutCardPools

// LayoutPoolNames is engine.LayoutPoolNames.
var LayoutPoolNames = engine.LayoutPoolNames

// ModelCards is engine.ModelCards.
var ModelCards = engine.ModelCards

// NewCounterModel is engine.NewCounterModel.
var NewCounterModel = engine.NewCounterModel

// NewLayoutPublisher is engine.NewLayoutPublisher.
var NewLayoutPublisher = engine.NewLayoutPublisher

// NewScheme is engine.NewScheme.
var NewScheme = engine.NewScheme

// Optimum is engine.Optimum.
var Optimum = engine.Optimum

// ParseLayout is engine.ParseLayout.
var ParseLayout = engine.ParseLayout

// PlanFleet is engine.PlanFleet.
var PlanFleet = engine.PlanFleet

// PlanLayouts is engine.PlanLayouts.
var PlanLayouts = engine.PlanLayouts

// Preference is engine.Preference.
var Preference = engine.Preference

// WithAging is engine.WithAging.
var WithAging = engine.WithAging

// WithCardsFirst is engine.WithCardsFirst.
var WithCardsFirst = engine.WithCardsFirst

// WithDefaultMix is engine.WithDefaultMix.
var WithDefaultMix = engine.WithDefaultMix

// WithFence is engine.WithFence.
var WithFence = engine.WithFence

// WithFitOnly is engine.WithFitOnly.
var WithFitOnly = engine.WithFitOnly

// WithMaxMoves is engine.WithMaxMoves.
var WithMaxMoves = engine.WithMaxMoves

// WithPoolDevices is engine.WithPoolDevices.
var WithPoolDevices = engine.WithPoolDevices

// WithProfiles is engine.WithProfiles.
var WithProfiles = engine.WithProfiles

// WithReserve is engine.WithReserve.
var WithReserve = engine.WithReserve

// WithSearchBudget is engine.WithSearchBudget.
var WithSearchBudget = engine.WithSearchBudget

// WithWorkBudget is engine.WithWorkBudget.
var WithWorkBudget = engine.WithWorkBudget

// DefaultAging is engine.DefaultAging.
const DefaultAging = engine.DefaultAging

// DefaultDefragWork is engine.DefaultDefragWork.
const DefaultDefragWork = engine.DefaultDefragWork

// DefaultFence is engine.DefaultFence.
const DefaultFence = engine.DefaultFence

// DefaultMaxMoves is engine.DefaultMaxMoves.
const DefaultMaxMoves = engine.DefaultMaxMoves

// DefaultSearchWork is engine.DefaultSearchWork.
const DefaultSearchWork = engine.DefaultSearchWork

// ErrCompute is engine.ErrCompute.
var ErrCompute = engine.ErrCompute

// ErrDeviceName is engine.ErrDeviceName.
var ErrDeviceName = engine.ErrDeviceName

// ErrExtra is engine.ErrExtra.
var ErrExtra = engine.ErrExtra

// ErrFleet is engine.ErrFleet.
var ErrFleet = engine.ErrFleet

// ErrInvalidScheme is engine.ErrInvalidScheme.
var ErrInvalidScheme = engine.ErrInvalidScheme

// ErrMaxCount is engine.ErrMaxCount.
var ErrMaxCount = engine.ErrMaxCount

// ErrMemory is engine.ErrMemory.
var ErrMemory = engine.ErrMemory

// ErrMode is engine.ErrMode.
var ErrMode = engine.ErrMode

// ErrOverlap is engine.ErrOverlap.
var ErrOverlap = engine.ErrOverlap

// ErrPartitions is engine.ErrPartitions.
var ErrPartitions = engine.ErrPartitions

// ErrPlacement is engine.ErrPlacement.
var ErrPlacement = engine.ErrPlacement

// ErrSchemeNotBuilt is engine.ErrSchemeNotBuilt.
var ErrSchemeNotBuilt = engine.ErrSchemeNotBuilt

// ErrUnknownProfile is engine.ErrUnknownProfile.
var ErrUnknownProfile = engine.ErrUnknownProfile

// FreeCardBonus is engine.FreeCardBonus.
const FreeCardBonus = engine.FreeCardBonus

// LayoutMaxDevices is engine.LayoutMaxDevices.
const LayoutMaxDevices = engine.LayoutMaxDevices

// MaxCountedUnits is engine.MaxCountedUnits.
const MaxCountedUnits = engine.MaxCountedUnits

// MaxExtras is engine.MaxExtras.
const MaxExtras = engine.MaxExtras

// MaxPlacedUnits is engine.MaxPlacedUnits.
const MaxPlacedUnits = engine.MaxPlacedUnits

// MaxProfiles is engine.MaxProfiles.
const MaxProfiles = engine.MaxProfiles

// Omit is engine.Omit.
const Omit = engine.Omit

// OpCreate is engine.OpCreate.
const OpCreate = engine.OpCreate

// OpDestroy is engine.OpDestroy.
const OpDestroy = engine.OpDestroy

// OptimumMaxCards is engine.OptimumMaxCards.
const OptimumMaxCards = engine.OptimumMaxCards

// OptimumMaxRequests is engine.OptimumMaxRequests.
const OptimumMaxRequests = engine.OptimumMaxRequests

// WholeCard is engine.WholeCard.
const WholeCard = engine.WholeCard
