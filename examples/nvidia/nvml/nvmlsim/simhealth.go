package nvmlsim

import (
	"context"
	"fmt"
	"time"

	"github.com/drakit/drakit/examples/nvidia/nvml"
)

// simEvent is an XID event in the state, numbered so that each watcher
// delivers each event once.
type simEvent struct {
	Seq   uint64           `json:"seq"`
	Event nvml.HealthEvent `json:"event"`
}

// maxSimEvents bounds the events kept in the state file; a watcher that
// polls less often than that many events arrive loses the oldest.
const maxSimEvents = 1024

// RaiseXID reports an XID error on a GPU (gpuInstance and computeInstance
// -1 for the whole GPU) to every WatchHealth of every process sharing the
// state. XID 79 (fallen off the bus) also makes the GPU lost, as on
// hardware: every later query of it fails with ErrGPULost until
// RecoverGPU, so a driver that was not watching when it happened still
// finds out.
func (s *Sim) RaiseXID(gpu int, xid uint64, gpuInstance, computeInstance int) error {
	op := fmt.Sprintf("raise XID %d on GPU %d", xid, gpu)
	return s.change(func(st *simState) (bool, error) {
		if gpu < 0 || gpu >= len(st.GPUs) {
			_, err := st.gpu(op, gpu)
			return false, err
		}
		g := &st.GPUs[gpu]
		if xid == 79 && gpuInstance < 0 {
			g.Lost = true
		}
		st.NextEvent++
		st.Events = append(st.Events, simEvent{Seq: st.NextEvent, Event: nvml.HealthEvent{
			GPU:             gpu,
			UUID:            g.UUID,
			XID:             xid,
			GPUInstance:     gpuInstance,
			ComputeInstance: computeInstance,
			Time:            time.Now().UTC(),
		}})
		if n := len(st.Events); n > maxSimEvents {
			st.Events = append([]simEvent(nil), st.Events[n-maxSimEvents:]...)
		}
		return true, nil
	})
}

// WatchHealth streams the XID events raised (by RaiseXID in any process
// sharing the state) after it returns, polling the state, after an
// Unmonitored event for each GPU an armed FaultRegisterEvents hit.
func (s *Sim) WatchHealth(ctx context.Context) (<-chan nvml.HealthEvent, error) {
	return s.watchHealth(ctx, false)
}

// WatchHealthLiveness is WatchHealth plus an Alive tick at every poll that
// found no event (LivenessWatcher).
func (s *Sim) WatchHealthLiveness(ctx context.Context) (<-chan nvml.HealthEvent, error) {
	return s.watchHealth(ctx, true)
}

func (s *Sim) watchHealth(ctx context.Context, alive bool) (<-chan nvml.HealthEvent, error) {
	var cursor uint64
	var unmonitored []nvml.HealthEvent
	err := s.change(func(st *simState) (bool, error) {
		cursor = st.NextEvent
		commit := false
		for i, g := range st.GPUs { // FaultRegisterEvents: this GPU is not watched
			if st.fault("register events", FaultRegisterEvents, i) != nil {
				commit = true
				unmonitored = append(
					unmonitored,
					nvml.HealthEvent{
						GPU:             i,
						UUID:            g.UUID,
						GPUInstance:     -1,
						ComputeInstance: -1,
						Time:            time.Now().UTC(),
						Unmonitored:     true,
					},
				)
			}
		}
		return commit, nil
	})
	if err != nil {
		return nil, fmt.Errorf("watch health: %w", err)
	}
	ch := make(chan nvml.HealthEvent)
	go func() {
		defer close(ch)
		for _, e := range unmonitored {
			select {
			case ch <- e:
			case <-ctx.Done():
				return
			}
		}
		t := time.NewTicker(s.poll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			var evs []nvml.HealthEvent
			_ = s.view(func(st *simState) error { // a failed read is retried at the next tick
				for _, e := range st.Events {
					if e.Seq > cursor {
						evs = append(evs, e.Event)
						cursor = e.Seq
					}
				}
				return nil
			})
			if alive && len(evs) == 0 {
				evs = append(
					evs,
					nvml.HealthEvent{GPU: -1, GPUInstance: -1, ComputeInstance: -1, Alive: true},
				)
			}
			for _, e := range evs {
				select {
				case ch <- e:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return ch, nil
}

// RecoverGPU reports that the GPU works again (a HealthEvent with
// Recovered set) to every WatchHealth of every process sharing the state,
// as a GPU reset after an XID would on a real machine; a lost GPU answers
// again.
func (s *Sim) RecoverGPU(gpu int) error {
	op := fmt.Sprintf("recover GPU %d", gpu)
	return s.change(func(st *simState) (bool, error) {
		if gpu < 0 || gpu >= len(st.GPUs) {
			_, err := st.gpu(op, gpu)
			return false, err
		}
		g := &st.GPUs[gpu]
		g.Lost = false
		st.NextEvent++
		st.Events = append(st.Events, simEvent{Seq: st.NextEvent, Event: nvml.HealthEvent{
			GPU:             gpu,
			UUID:            g.UUID,
			GPUInstance:     -1,
			ComputeInstance: -1,
			Time:            time.Now().UTC(),
			Recovered:       true,
		}})
		if n := len(st.Events); n > maxSimEvents {
			st.Events = append([]simEvent(nil), st.Events[n-maxSimEvents:]...)
		}
		return true, nil
	})
}
