package ledger_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/ledger"
	"github.com/drakit/drakit/partition/lifecycle"
	"github.com/drakit/drakit/partition/plan"
)

const uuid = "GPU-0"

func making(profile string, start int) lifecycle.Intent {
	return lifecycle.Intent{
		Key:    lifecycle.Key{Card: uuid, Profile: profile, Start: start},
		Claims: []string{"claim-a"},
	}
}

func usingWhole() lifecycle.Intent {
	return lifecycle.Intent{Key: lifecycle.WholeCard(uuid), Claims: []string{"claim-a"}}
}

func inst(profile string, start int) partition.Instance {
	return partition.Instance{Profile: profile, Start: start, InUse: true}
}

// inUseCard is card 0 of an H100 built from made and the journal's
// intents, as a driver builds it before each Sync.
func inUseCard(
	t *testing.T,
	made partition.Layout,
	intents []lifecycle.Intent,
) (ledger.AgentCard, []error) {
	t.Helper()
	u := ledger.InUse{Made: made}
	u.Journal, u.Whole = lifecycle.CardInUse(intents, uuid)
	return u.Card(ledger.AgentCard{Index: 0, Scheme: h100(t), Profiles: []string{"1g.10gb"}})
}

// TestInUseCard: what the hardware lists and what the journal holds and
// has not released are Busy, once each; an in-use partition that
// overlaps one before it is left out with an error naming it; the whole
// card and partitions at once keep the partitions and drop the whole.
func TestInUseCard(t *testing.T) {
	for _, tc := range []struct {
		name      string
		made      partition.Layout
		intents   []lifecycle.Intent
		busy      partition.Layout
		busyWhole bool
		refused   []string // device names of the OverlapErrors
	}{
		{name: "nothing"},
		{
			name: "made by anyone",
			made: partition.Layout{{Profile: "1g.10gb", Start: 3}},
			busy: partition.Layout{inst("1g.10gb", 3)},
		},
		{
			name:    "an intent being made counts before the hardware lists it",
			intents: []lifecycle.Intent{making("3g.40gb", 0)},
			busy:    partition.Layout{inst("3g.40gb", 0)},
		},
		{
			name: "a released intent does not count",
			intents: []lifecycle.Intent{{
				Key:    lifecycle.Key{Card: uuid, Profile: "3g.40gb", Start: 0},
				Claims: []string{},
			}},
		},
		{
			name: "another card's intent does not count",
			intents: []lifecycle.Intent{{
				Key:    lifecycle.Key{Card: "GPU-1", Profile: "3g.40gb", Start: 0},
				Claims: []string{"claim-a"},
			}},
		},
		{
			name:    "made and intended once",
			made:    partition.Layout{{Profile: "3g.40gb", Start: 0}},
			intents: []lifecycle.Intent{making("3g.40gb", 0), making("1g.10gb", 6)},
			busy:    partition.Layout{inst("3g.40gb", 0), inst("1g.10gb", 6)},
		},
		{
			name:    "an overlapping intent is refused, the made partition kept",
			made:    partition.Layout{{Profile: "2g.20gb", Start: 2}},
			intents: []lifecycle.Intent{making("3g.40gb", 0)},
			busy:    partition.Layout{inst("2g.20gb", 2)},
			refused: []string{"gpu-0-3g-40gb-0"},
		},
		{
			name:    "an unknown profile is refused",
			made:    partition.Layout{{Profile: "5g.50gb", Start: 0}},
			refused: []string{"5g.50gb at 0"},
		},
		{
			name:      "the whole card alone",
			intents:   []lifecycle.Intent{usingWhole()},
			busyWhole: true,
		},
		{
			name:    "whole and partitions at once: the partitions stay, the whole waits",
			made:    partition.Layout{{Profile: "1g.10gb", Start: 0}},
			intents: []lifecycle.Intent{usingWhole()},
			busy:    partition.Layout{inst("1g.10gb", 0)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, errs := inUseCard(t, tc.made, tc.intents)
			if diff := gocmp.Diff(tc.busy, c.Busy); diff != "" {
				t.Errorf("Busy (-want +got):\n%s", diff)
			}
			if c.BusyWhole != tc.busyWhole {
				t.Errorf("BusyWhole = %v, want %v", c.BusyWhole, tc.busyWhole)
			}
			if c.Index != 0 || len(c.Profiles) != 1 {
				t.Errorf("the card's other fields changed: %+v", c)
			}
			var refused []string
			for _, err := range errs {
				var oe *ledger.OverlapError
				if !errors.As(err, &oe) || !strings.Contains(err.Error(), oe.Device) {
					t.Fatalf("error %v is not an OverlapError naming its device", err)
				}
				refused = append(refused, oe.Device)
			}
			if diff := gocmp.Diff(tc.refused, refused); diff != "" {
				t.Errorf("refused devices (-want +got):\n%s", diff)
			}
			if err := c.Scheme.Validate(c.Busy); err != nil {
				t.Errorf("Busy is not a valid layout: %v", err)
			}
		})
	}
}

// TestInUsePublish: a partition the journal is making is not opened to
// another claim, nor anything overlapping it, and the whole card is not
// opened beside it; once its intent is released and the hardware no
// longer lists it, its space is opened again.
func TestInUsePublish(t *testing.T) {
	schemes := func(string) (*partition.Scheme, error) { return h100(t), nil }
	l := &ledger.Ledger{Node: "n1", Seeded: true, Demand: plan.Demand{"1g.10gb": 7}}
	card, errs := inUseCard(t, nil, []lifecycle.Intent{making("3g.40gb", 0)})
	if errs != nil {
		t.Fatal(errs)
	}
	if _, err := l.Publish("n1/layout", []ledger.AgentCard{card}); err != nil {
		t.Fatal(err)
	}
	if err := l.Check(schemes); err != nil {
		t.Fatalf("with a partition being made: %v", err)
	}
	for _, d := range l.Open {
		ref, err := h100(t).ParseDeviceName(d.Name)
		if err != nil || ref.Profile == "" || ref.Start < 4 {
			t.Errorf("open beside 3g.40gb@0 being made: %v", d)
		}
	}
	if len(l.Open) == 0 {
		t.Fatal("nothing opened beside the partition being made")
	}

	released := making("3g.40gb", 0)
	released.Claims = []string{}
	card, _ = inUseCard(t, nil, []lifecycle.Intent{released})
	if _, err := l.Publish("n1/layout", []ledger.AgentCard{card}); err != nil {
		t.Fatal(err)
	}
	if err := l.Check(schemes); err != nil {
		t.Fatal(err)
	}
	if len(l.Open) != 7 {
		t.Errorf("after the release, open %v, want seven 1g.10gb", l.Open)
	}
}

// TestSyncLogAtOnce: a ledger error and a withheld card are logged once per
// change, from calls at once (run with -race).
func TestSyncLogAtOnce(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	var s ledger.SyncLog
	down := errors.New("the API server is down")
	steps := []struct {
		withheld map[int]string
		err      error
	}{
		{withheld: map[int]string{0: "in use: overlap"}},
		{withheld: map[int]string{0: "in use: overlap"}},
		{err: down},
		{err: down},
		{withheld: map[int]string{0: "in use: overlap", 1: "claims hold x"}},
		{withheld: map[int]string{0: "in use: overlap", 1: "claims hold x"}},
	}
	for _, st := range steps {
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { s.Log(logger, st.withheld, st.err) })
		}
		wg.Wait()
	}
	logged := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	for what, want := range map[string]int{
		"the API server is down":   1,
		`reason="in use: overlap"`: 1,
		`reason="claims hold x"`:   1,
	} {
		if got := strings.Count(logged, what); got != want {
			t.Errorf("%q logged %d times, want %d:\n%s", what, got, want, logged)
		}
	}
}
